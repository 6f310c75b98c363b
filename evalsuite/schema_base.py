"""The base of the analysis records (``evalsuite.schema``, ``evalsuite.schema_studies``): frozen models with
``extra="forbid"``, and the rate-with-interval record both use."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RateCI(Frozen):
    """A rate with a Wilson CI (pooled episodes) and, where available, a repository-clustered SE."""

    endpoint: str
    successes: float
    n: int
    rate: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    method: str = "wilson"
    se_clustered: float | None = None
