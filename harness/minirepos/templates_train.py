"""Train-pool module templates, first half (also used by the held-out ``seen_templates`` tier). See ``templates.py``."""

from __future__ import annotations

from harness.minirepos.template_model import ModuleTemplate

_PRICING = '''"""Price calculations for the checkout: discounts, tax and order totals."""

TAX_RATE = $TAX
BULK_THRESHOLD = $BULK


def apply_discount(price, percent):
    """Return ``price`` reduced by ``percent`` per cent, rounded to cents."""
    if percent <= 0:
        return round(price, 2)
    reduced = price * (100 - percent) / 100
    return round(reduced, 2)


def line_total(unit_price, quantity):
    """Total for one order line; lines at or above the bulk threshold get 10 per cent off."""
    total = unit_price * quantity
    if quantity >= BULK_THRESHOLD:
        total = apply_discount(total, 10)
    return round(total, 2)


def order_subtotal(lines):
    """Sum of ``line_total`` over ``(unit_price, quantity)`` pairs."""
    subtotal = 0.0
    for unit_price, quantity in lines:
        subtotal += line_total(unit_price, quantity)
    return round(subtotal, 2)


def add_tax(amount):
    """Return ``amount`` with sales tax added, rounded to cents."""
    return round(amount * (1 + TAX_RATE), 2)


def format_price(amount, currency="EUR"):
    """Human-readable price such as ``'12.50 EUR'``."""
    return f"{amount:.2f} {currency}"
'''

_INVENTORY = '''"""Stock keeping: what is on the shelf, what to reorder and what is running low."""

REORDER_MARGIN = $MARGIN


def total_units(stock):
    """Number of units over all SKUs in ``stock`` (a mapping sku -> units)."""
    total = 0
    for units in stock.values():
        total += units
    return total


def low_stock(stock, threshold):
    """SKUs whose units are strictly below ``threshold``, sorted by name."""
    low = []
    for sku, units in stock.items():
        if units < threshold:
            low.append(sku)
    return sorted(low)


def reorder_quantity(units, target):
    """How many units to order to reach ``target`` plus the safety margin; never negative."""
    missing = target + REORDER_MARGIN - units
    if missing < 0:
        return 0
    return missing


def remove_units(stock, sku, count):
    """Return a copy of ``stock`` with ``count`` units of ``sku`` taken out (floored at zero)."""
    updated = dict(stock)
    remaining = updated.get(sku, 0) - count
    updated[sku] = max(remaining, 0)
    return updated


def busiest_skus(sales, limit):
    """The ``limit`` SKUs with the most sales, most sold first (ties by name)."""
    ranked = sorted(sales.items(), key=lambda item: (-item[1], item[0]))
    return [sku for sku, _ in ranked[:limit]]
'''

_TEXTUTIL = '''"""Small text helpers used when rendering titles, slugs and previews."""


def slugify(title):
    """Lower-case, dash-separated version of ``title`` with punctuation dropped."""
    words = []
    for word in title.split():
        cleaned = "".join(ch for ch in word if ch.isalnum())
        if cleaned:
            words.append(cleaned.lower())
    return "-".join(words)


def truncate(text, width):
    """Cut ``text`` to at most ``width`` characters, ending with '...' when it was cut."""
    if len(text) <= width:
        return text
    return text[: width - 3] + "..."


def initials(name):
    """Upper-case initials of a person's name, e.g. 'Ada Lovelace' -> 'AL'."""
    parts = name.split()
    return "".join(part[0].upper() for part in parts)


def count_words(text):
    """Number of whitespace-separated words in ``text``."""
    if not text:
        return 0
    return len(text.split())


def pad_label(label, width):
    """Left-align ``label`` in a field of ``width`` characters, padded with dots."""
    return label.ljust(width, ".")


def join_names(names):
    """Readable list: 'a', 'a and b', 'a, b and c'."""
    if len(names) == 0:
        return ""
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " and " + names[-1]
'''

_STATS = '''"""Descriptive statistics for small samples of measurements."""


def mean(values):
    """Arithmetic mean; 0.0 for an empty sample."""
    if not values:
        return 0.0
    return sum(values) / len(values)


def median(values):
    """Middle value of the sorted sample (mean of the two middle values for even sizes)."""
    ordered = sorted(values)
    size = len(ordered)
    middle = size // 2
    if size % 2 == 1:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def value_range(values):
    """Largest minus smallest value."""
    return max(values) - min(values)


def moving_average(values, window):
    """Averages of each run of ``window`` consecutive values."""
    averages = []
    for start in range(len(values) - window + 1):
        chunk = values[start : start + window]
        averages.append(sum(chunk) / window)
    return averages


def count_above(values, limit):
    """How many values are strictly greater than ``limit``."""
    count = 0
    for value in values:
        if value > limit:
            count += 1
    return count
'''

_SCHEDULE = '''"""Meeting-room scheduling with half-open ``(start, end)`` intervals in minutes."""

DAY_START = $DAYSTART
DAY_END = 1080


def duration(slot):
    """Length of a slot in minutes."""
    start, end = slot
    return end - start


def overlaps(first, second):
    """True when two half-open slots share at least one minute."""
    return first[0] < second[1] and second[0] < first[1]


def merge_slots(slots):
    """Merge overlapping or touching slots; the result is sorted by start."""
    merged = []
    for start, end in sorted(slots):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def free_slots(busy):
    """Gaps between busy slots within the working day."""
    gaps = []
    cursor = DAY_START
    for start, end in merge_slots(busy):
        if start > cursor:
            gaps.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < DAY_END:
        gaps.append((cursor, DAY_END))
    return gaps


def format_minutes(minute):
    """Clock time such as '09:05' for a minute of the day."""
    hours, minutes = divmod(minute, 60)
    return f"{hours:02d}:{minutes:02d}"
'''

TRAIN_TEMPLATES_A: list[ModuleTemplate] = [
    ModuleTemplate(
        key="pricing",
        module="pricing",
        pool="train",
        domain="shop",
        source=_PRICING,
        params={"TAX": ("0.2", "0.08", "0.15"), "BULK": ("10", "12", "20")},
        cases={
            "apply_discount": ("100.0, 25", "80.0, 0", "19.99, 50", "250.0, 15"),
            "line_total": ("2.5, 4", "1.25, 24", "3.0, 1", "0.5, 30"),
            "order_subtotal": ("[(2.5, 4), (1.0, 3)]", "[]", "[(10.0, 1), (1.5, 25)]"),
            "add_tax": ("100.0", "19.99", "0.0"),
            "format_price": ("12.5", "3", "7.456, 'USD'"),
        },
    ),
    ModuleTemplate(
        key="inventory",
        module="inventory",
        pool="train",
        domain="warehouse",
        source=_INVENTORY,
        params={"MARGIN": ("2", "5", "3")},
        cases={
            "total_units": ("{'bolt': 12, 'nut': 30}", "{}", "{'gear': 7}"),
            "low_stock": ("{'bolt': 3, 'nut': 30, 'gear': 5}, 5", "{'a': 1}, 1", "{'z': 0, 'b': 9}, 10"),
            "reorder_quantity": ("4, 10", "40, 10", "0, 3", "10, 10"),
            "remove_units": ("{'bolt': 5}, 'bolt', 2", "{'bolt': 5}, 'bolt', 9", "{}, 'nut', 1"),
            "busiest_skus": (
                "{'a': 5, 'b': 9, 'c': 5}, 2",
                "{'x': 1, 'y': 3, 'z': 2}, 3",
                "{'solo': 4}, 1",
            ),
        },
    ),
    ModuleTemplate(
        key="textutil",
        module="textutil",
        pool="train",
        domain="cms",
        source=_TEXTUTIL,
        cases={
            "slugify": ("'Hello, World!'", "'  Mixed CASE title  '", "'C3PO & R2D2'"),
            "truncate": ("'short', 10", "'a longer sentence here', 10", "'exactly10!', 10"),
            "initials": ("'Ada Lovelace'", "'grace brewster hopper'", "'Linus'"),
            "count_words": ("'one two  three'", "''", "'single'"),
            "pad_label": ("'Total', 9", "'ID', 4", "'Name', 2"),
            "join_names": ("['Ann', 'Bob', 'Cy']", "['Ann']", "[]", "['Ann', 'Bob']"),
        },
    ),
    ModuleTemplate(
        key="stats",
        module="stats",
        pool="train",
        domain="analytics",
        source=_STATS,
        cases={
            "mean": ("[2, 4, 9]", "[]", "[1.5, 2.5]"),
            "median": ("[5, 1, 3]", "[4, 1, 3, 2]", "[7]", "[10, 2, 8, 4, 6, 12]"),
            "value_range": ("[3, 9, 1]", "[5]", "[-2, 4]"),
            "moving_average": ("[1, 2, 3, 4], 2", "[2, 4, 6], 3", "[5, 1, 3, 7, 9], 3"),
            "count_above": ("[1, 5, 7, 5], 5", "[], 0", "[-1, 0, 1], -1"),
        },
    ),
    ModuleTemplate(
        key="schedule",
        module="schedule",
        pool="train",
        domain="calendar",
        source=_SCHEDULE,
        params={"DAYSTART": ("480", "540")},
        cases={
            "duration": ("(540, 600)", "(600, 615)"),
            "overlaps": ("(540, 600), (590, 660)", "(540, 600), (600, 660)", "(500, 700), (550, 560)"),
            "merge_slots": ("[(600, 660), (540, 610)]", "[(540, 600), (600, 630)]", "[(700, 720), (540, 560)]"),
            "free_slots": ("[(600, 660)]", "[]", "[(480, 700), (690, 1080)]", "[(900, 960), (540, 600)]"),
            "format_minutes": ("545", "1080", "61"),
        },
    ),
]
