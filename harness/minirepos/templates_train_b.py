"""Train-pool module templates, second half (ledger, grades, units, versions, paging). See ``templates.py``."""

from __future__ import annotations

from harness.minirepos.template_model import ModuleTemplate

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

TRAIN_TEMPLATES_B: list[ModuleTemplate] = [
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
