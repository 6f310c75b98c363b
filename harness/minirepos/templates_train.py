"""Train-pool module templates (also used by the held-out ``seen_templates`` tier). See ``templates.py``."""

from __future__ import annotations

from harness.minirepos.templates import ModuleTemplate

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

_LEDGER = '''"""A tiny bank ledger: balances, fees and statements from lists of transactions."""

OVERDRAFT_FEE = $FEE


def balance(transactions):
    """Sum of signed amounts (deposits positive, withdrawals negative)."""
    total = 0
    for amount in transactions:
        total += amount
    return total


def apply_fees(transactions):
    """Balance after charging the overdraft fee once for every withdrawal that left it negative."""
    running = 0
    fees = 0
    for amount in transactions:
        running += amount
        if amount < 0 and running < 0:
            fees += OVERDRAFT_FEE
    return running - fees


def largest_withdrawal(transactions):
    """Largest withdrawal as a positive number; 0 when there is none."""
    withdrawals = [-amount for amount in transactions if amount < 0]
    if not withdrawals:
        return 0
    return max(withdrawals)


def split_amount(total, parts):
    """Split ``total`` cents into ``parts`` near-equal integer shares, larger shares first."""
    share, rest = divmod(total, parts)
    return [share + 1 if index < rest else share for index in range(parts)]


def statement_line(label, amount):
    """One line of a statement, e.g. 'rent: -750'."""
    return f"{label}: {amount:+d}"
'''

_GRADES = '''"""Course grading: weighted scores, letter grades and class summaries."""

PASS_MARK = $PASSMARK


def weighted_score(scores, weights):
    """Weighted average of ``scores`` with the given ``weights``."""
    total = 0
    weight_sum = 0
    for score, weight in zip(scores, weights):
        total += score * weight
        weight_sum += weight
    if weight_sum == 0:
        return 0.0
    return round(total / weight_sum, 1)


def letter(score):
    """Letter grade for a 0-100 score."""
    if score >= 90:
        return "A"
    if score >= 75:
        return "B"
    if score >= PASS_MARK:
        return "C"
    return "F"


def passed(students):
    """Names of students with a score at or above the pass mark, in input order."""
    return [name for name, score in students if score >= PASS_MARK]


def top_student(students):
    """Name of the best student; None for an empty class."""
    if not students:
        return None
    best_name, best_score = students[0]
    for name, score in students[1:]:
        if score > best_score:
            best_name, best_score = name, score
    return best_name


def report_card(name, score):
    """One-line report such as 'Ada: 91.5 (A)'."""
    return f"{name}: {score:.1f} ({letter(score)})"
'''

_UNITS = '''"""Unit conversions for the recipe and fitness pages."""

KM_PER_MILE = 1.609344


def celsius_to_fahrenheit(celsius):
    """Convert degrees Celsius to Fahrenheit, one decimal."""
    return round(celsius * 9 / 5 + 32, 1)


def fahrenheit_to_celsius(fahrenheit):
    """Convert degrees Fahrenheit to Celsius, one decimal."""
    return round((fahrenheit - 32) * 5 / 9, 1)


def miles_to_km(miles):
    """Convert miles to kilometres, two decimals."""
    return round(miles * KM_PER_MILE, 2)


def pace_per_km(minutes, km):
    """Running pace as 'M:SS' per kilometre."""
    if km <= 0:
        return "-"
    seconds = round(minutes * 60 / km)
    return f"{seconds // 60}:{seconds % 60:02d}"


def scale_grams(grams, servings, base_servings):
    """Scale an ingredient weight from ``base_servings`` to ``servings``, whole grams."""
    return round(grams * servings / base_servings)
'''

_VERSIONS = '''"""Parsing and comparing dotted release versions such as '1.4.2'."""


def parse_version(text):
    """Tuple of integers from a dotted version; missing parts count as 0 (three parts)."""
    parts = [int(piece) for piece in text.split(".")]
    padded = parts + [0] * (3 - len(parts))
    return tuple(padded[:3])


def compare(first, second):
    """-1, 0 or 1 as ``first`` is older, equal or newer than ``second``."""
    a = parse_version(first)
    b = parse_version(second)
    if a < b:
        return -1
    if a > b:
        return 1
    return 0


def bump(text, part):
    """Next version: part is 'major', 'minor' or 'patch'; lower parts reset to 0."""
    major, minor, patch = parse_version(text)
    if part == "major":
        return f"{major + 1}.0.0"
    if part == "minor":
        return f"{major}.{minor + 1}.0"
    return f"{major}.{minor}.{patch + 1}"


def newest(versions):
    """The newest version of a list; None when the list is empty."""
    if not versions:
        return None
    best = versions[0]
    for candidate in versions[1:]:
        if compare(candidate, best) > 0:
            best = candidate
    return best


def is_compatible(installed, required):
    """Same major version and at least the required minor/patch."""
    have = parse_version(installed)
    need = parse_version(required)
    return have[0] == need[0] and have >= need
'''

_PAGING = '''"""Pagination for list endpoints: page counts, slices and navigation labels."""

DEFAULT_PAGE_SIZE = $PAGESIZE


def page_count(total, size=DEFAULT_PAGE_SIZE):
    """Number of pages needed for ``total`` items; at least one page."""
    if total <= 0:
        return 1
    return (total + size - 1) // size


def page_items(items, page, size=DEFAULT_PAGE_SIZE):
    """Items on 1-based ``page``."""
    start = (page - 1) * size
    return items[start : start + size]


def clamp_page(page, total, size=DEFAULT_PAGE_SIZE):
    """``page`` limited to the valid range 1..page_count."""
    last = page_count(total, size)
    return min(max(page, 1), last)


def page_window(page, last, radius):
    """Page numbers shown around ``page`` in a pager, within 1..last."""
    first = max(1, page - radius)
    final = min(last, page + radius)
    return list(range(first, final + 1))


def page_label(page, last):
    """Label such as 'Page 2 of 7'."""
    return f"Page {page} of {last}"
'''

TRAIN_TEMPLATES: list[ModuleTemplate] = [
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
    ModuleTemplate(
        key="ledger",
        module="ledger",
        pool="train",
        domain="banking",
        source=_LEDGER,
        params={"FEE": ("25", "30", "15")},
        cases={
            "balance": ("[100, -30, 5]", "[]", "[-10]"),
            "apply_fees": ("[100, -150, -20, 200]", "[50, -20]", "[-5, -5]"),
            "largest_withdrawal": ("[100, -30, -75, 10]", "[5, 6]", "[-1]"),
            "split_amount": ("100, 3", "10, 5", "7, 4"),
            "statement_line": ("'rent', -750", "'salary', 2100", "'zero', 0"),
        },
    ),
    ModuleTemplate(
        key="grades",
        module="grades",
        pool="train",
        domain="school",
        source=_GRADES,
        params={"PASSMARK": ("50", "60", "55")},
        cases={
            "weighted_score": ("[80, 90], [1, 3]", "[70], [0]", "[50, 100, 75], [2, 1, 1]"),
            "letter": ("95", "75", "74.5", "20", "90"),
            "passed": ("[('ann', 72), ('bob', 41), ('cy', 60)]", "[]", "[('dee', 55)]"),
            "top_student": ("[('ann', 72), ('bob', 91), ('cy', 91)]", "[]", "[('solo', 10)]"),
            "report_card": ("'Ada', 91.5", "'Bo', 60", "'Cy', 12.25"),
        },
    ),
    ModuleTemplate(
        key="units",
        module="units",
        pool="train",
        domain="fitness",
        source=_UNITS,
        cases={
            "celsius_to_fahrenheit": ("100", "-40", "36.6"),
            "fahrenheit_to_celsius": ("212", "0", "98.6"),
            "miles_to_km": ("10", "0.5", "26.2"),
            "pace_per_km": ("50, 10", "21, 4", "30, 0", "61, 12"),
            "scale_grams": ("200, 6, 4", "125, 2, 4", "90, 3, 3"),
        },
    ),
    ModuleTemplate(
        key="versions",
        module="versions",
        pool="train",
        domain="packaging",
        source=_VERSIONS,
        cases={
            "parse_version": ("'1.4.2'", "'2'", "'0.10'"),
            "compare": ("'1.2.0', '1.10.0'", "'2.0', '2.0.0'", "'3.1.4', '3.1.3'"),
            "bump": ("'1.4.2', 'major'", "'1.4.2', 'minor'", "'1.4.2', 'patch'", "'0.9', 'minor'"),
            "newest": ("['1.2.0', '1.10.0', '1.9.9']", "[]", "['0.1']"),
            "is_compatible": ("'1.5.0', '1.4.2'", "'2.0.0', '1.4.2'", "'1.4.2', '1.4.2'", "'1.3.9', '1.4.0'"),
        },
    ),
    ModuleTemplate(
        key="paging",
        module="paging",
        pool="train",
        domain="api",
        source=_PAGING,
        params={"PAGESIZE": ("10", "20", "25")},
        cases={
            "page_count": ("95", "0", "100, 10", "101, 25"),
            "page_items": ("list(range(30)), 2, 7", "list(range(5)), 1, 10", "list(range(12)), 3, 5"),
            "clamp_page": ("0, 40, 10", "9, 40, 10", "3, 95, 10"),
            "page_window": ("5, 9, 2", "1, 9, 2", "8, 9, 3", "3, 3, 1"),
            "page_label": ("2, 7", "1, 1"),
        },
    ),
]
