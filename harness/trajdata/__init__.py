"""Logged trajectories in, a filtered dataset out (torch-free): importers, filters, the dataset card."""
