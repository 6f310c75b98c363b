"""Unseen-pool module templates: only the held-out ``unseen_templates`` tier uses them.

No module or function name here may occur in ``templates_train*.py`` (``templates.check_pools_disjoint``).
"""

from __future__ import annotations

from harness.minirepos.template_model import ModuleTemplate

_SHIPPING = '''"""Parcel shipping quotes: billable weight, zone surcharges and delivery estimates."""

VOLUMETRIC_DIVISOR = $DIVISOR
FREE_SHIPPING_FROM = 60


def volumetric_weight(length_cm, width_cm, height_cm):
    """Dimensional weight in kilograms, one decimal."""
    return round(length_cm * width_cm * height_cm / VOLUMETRIC_DIVISOR, 1)


def billable_weight(actual_kg, dimensions):
    """The larger of the actual and the volumetric weight."""
    return max(actual_kg, volumetric_weight(*dimensions))


def zone_surcharge(zone):
    """Surcharge in euros for delivery zones 1 (local) to 4 (remote)."""
    if zone <= 1:
        return 0.0
    return 2.5 * (zone - 1)


def shipping_quote(order_value, weight_kg, zone):
    """Quote in euros: free from the threshold on, else base fee per kilogram plus surcharge."""
    if order_value >= FREE_SHIPPING_FROM:
        return 0.0
    return round(4.0 + 1.2 * weight_kg + zone_surcharge(zone), 2)


def delivery_days(zone, express):
    """Estimated delivery days; express halves the time, at least one day."""
    days = 1 + zone
    if express:
        days = max(1, days // 2)
    return days
'''

_PLAYLIST = '''"""Playlist tools: durations, shuffling order and display strings for tracks."""


def track_seconds(length):
    """Seconds in a 'M:SS' track length."""
    minutes, seconds = length.split(":")
    return int(minutes) * 60 + int(seconds)


def playlist_seconds(lengths):
    """Total seconds of all tracks."""
    total = 0
    for length in lengths:
        total += track_seconds(length)
    return total


def format_runtime(seconds):
    """Runtime such as '1h 05m' or '42m'."""
    hours, rest = divmod(seconds, 3600)
    minutes = rest // 60
    if hours == 0:
        return f"{minutes}m"
    return f"{hours}h {minutes:02d}m"


def longest_track(tracks):
    """Title of the longest ``(title, length)`` track; None for an empty playlist."""
    if not tracks:
        return None
    best_title, best_length = tracks[0]
    for title, length in tracks[1:]:
        if track_seconds(length) > track_seconds(best_length):
            best_title, best_length = title, length
    return best_title


def interleave(first, second):
    """Alternate tracks from two playlists, then append what is left of the longer one."""
    mixed = []
    shorter = min(len(first), len(second))
    for index in range(shorter):
        mixed.append(first[index])
        mixed.append(second[index])
    mixed.extend(first[shorter:])
    mixed.extend(second[shorter:])
    return mixed
'''

_PARKING = '''"""Car-park tariffs: chargeable hours, daily caps and receipt text."""

HOURLY_RATE = $RATE
DAILY_CAP = 24
GRACE_MINUTES = 15


def chargeable_hours(minutes_parked):
    """Whole hours to charge after the grace period, rounding partial hours up."""
    if minutes_parked <= GRACE_MINUTES:
        return 0
    return (minutes_parked + 59) // 60


def parking_fee(minutes_parked):
    """Fee for one stay, capped per started day."""
    hours = chargeable_hours(minutes_parked)
    full_days, extra_hours = divmod(hours, 24)
    return full_days * DAILY_CAP + min(extra_hours * HOURLY_RATE, DAILY_CAP)


def occupancy_percent(occupied, capacity):
    """Share of occupied bays in per cent, rounded to a whole number."""
    if capacity == 0:
        return 0
    return round(100 * occupied / capacity)


def busiest_hour(entries_per_hour):
    """Hour index (0-23) with the most entries; the earliest on ties."""
    best_hour = 0
    for hour in range(len(entries_per_hour)):
        if entries_per_hour[hour] > entries_per_hour[best_hour]:
            best_hour = hour
    return best_hour


def receipt_text(plate, fee):
    """Receipt line such as 'AB-123 paid 6.00'."""
    return f"{plate.upper()} paid {fee:.2f}"
'''

_LEAGUE = '''"""Sports league table: points, goal difference and standings."""

POINTS_FOR_WIN = 3
POINTS_FOR_DRAW = $DRAWPTS


def match_points(scored, conceded):
    """League points earned from one match."""
    if scored > conceded:
        return POINTS_FOR_WIN
    if scored == conceded:
        return POINTS_FOR_DRAW
    return 0


def season_points(results):
    """Points over a season of ``(scored, conceded)`` results."""
    points = 0
    for scored, conceded in results:
        points += match_points(scored, conceded)
    return points


def goal_difference(results):
    """Goals scored minus goals conceded."""
    diff = 0
    for scored, conceded in results:
        diff += scored - conceded
    return diff


def standings(table):
    """Team names ordered by points, then goal difference, then name."""
    ordered = sorted(table, key=lambda row: (-row[1], -row[2], row[0]))
    return [row[0] for row in ordered]


def relegated(table, spots):
    """The ``spots`` teams at the bottom of the standings, worst last."""
    order = standings(table)
    if spots <= 0:
        return []
    return order[-spots:]
'''

_RECIPES = '''"""Recipe scaling and kitchen timing helpers."""


def portion_factor(wanted, serves):
    """Multiplier from a recipe that ``serves`` people to ``wanted`` people."""
    if serves == 0:
        return 0.0
    return wanted / serves


def scaled_ingredients(ingredients, wanted, serves):
    """Ingredient amounts rescaled and rounded to one decimal, same order."""
    factor = portion_factor(wanted, serves)
    return [(name, round(amount * factor, 1)) for name, amount in ingredients]


def oven_minutes(weight_kg, minutes_per_kg, resting):
    """Roasting time: minutes per kilogram plus resting time, whole minutes."""
    return round(weight_kg * minutes_per_kg) + resting


def shopping_list(ingredients, pantry):
    """Ingredient names not already in the pantry, alphabetical."""
    missing = [name for name, _ in ingredients if name not in pantry]
    return sorted(missing)


def timer_label(minutes):
    """Kitchen timer text such as '1:30' for 90 minutes."""
    hours = minutes // 60
    rest = minutes - hours * 60
    return f"{hours}:{rest:02d}"
'''

UNSEEN_TEMPLATES: list[ModuleTemplate] = [
    ModuleTemplate(
        key="shipping",
        module="shipping",
        pool="unseen",
        domain="logistics",
        source=_SHIPPING,
        params={"DIVISOR": ("5000", "6000")},
        cases={
            "volumetric_weight": ("40, 30, 20", "10, 10, 10"),
            "billable_weight": ("2.0, (40, 30, 20)", "9.5, (10, 10, 10)", "3.0, (60, 40, 40)"),
            "zone_surcharge": ("1", "3", "4"),
            "shipping_quote": ("25.0, 2.0, 1", "80.0, 5.0, 4", "59.99, 1.5, 3"),
            "delivery_days": ("2, False", "3, True", "1, True"),
        },
    ),
    ModuleTemplate(
        key="playlist",
        module="playlist",
        pool="unseen",
        domain="music",
        source=_PLAYLIST,
        cases={
            "track_seconds": ("'3:45'", "'0:07'", "'12:00'"),
            "playlist_seconds": ("['3:45', '4:15']", "[]", "['59:59', '0:01']"),
            "format_runtime": ("2520", "3900", "7265"),
            "longest_track": ("[('a', '3:10'), ('b', '4:01'), ('c', '4:01')]", "[]", "[('x', '0:30')]"),
            "interleave": ("['a', 'b', 'c'], ['x']", "['a'], ['x', 'y', 'z']", "[], ['q']"),
        },
    ),
    ModuleTemplate(
        key="parking",
        module="parking",
        pool="unseen",
        domain="mobility",
        source=_PARKING,
        params={"RATE": ("2", "3")},
        cases={
            "chargeable_hours": ("10", "15", "16", "120", "121"),
            "parking_fee": ("90", "600", "1500", "3000"),
            "occupancy_percent": ("45, 60", "0, 0", "59, 200"),
            "busiest_hour": ("[3, 9, 4, 9]", "[5]", "[0, 0, 1]"),
            "receipt_text": ("'ab-123', 6", "'xy-9', 12.5"),
        },
    ),
    ModuleTemplate(
        key="league",
        module="league",
        pool="unseen",
        domain="sports",
        source=_LEAGUE,
        params={"DRAWPTS": ("1",)},
        cases={
            "match_points": ("2, 1", "1, 1", "0, 3"),
            "season_points": ("[(2, 1), (1, 1), (0, 3)]", "[]", "[(4, 0), (3, 2)]"),
            "goal_difference": ("[(2, 1), (1, 1), (0, 3)]", "[(5, 0)]"),
            "standings": (
                "[('Ajax', 10, 4), ('Bree', 12, 1), ('Core', 10, 6)]",
                "[('Zed', 3, 0), ('Amo', 3, 0)]",
            ),
            "relegated": ("[('A', 9, 1), ('B', 3, -2), ('C', 5, 0), ('D', 1, -6)], 2", "[('A', 1, 0)], 0"),
        },
    ),
    ModuleTemplate(
        key="recipes",
        module="recipes",
        pool="unseen",
        domain="kitchen",
        source=_RECIPES,
        cases={
            "portion_factor": ("6, 4", "2, 0", "3, 3"),
            "scaled_ingredients": ("[('flour', 250), ('milk', 0.5)], 6, 4", "[('egg', 2)], 1, 2", "[], 2, 4"),
            "oven_minutes": ("1.5, 40, 15", "2.2, 35, 10", "0, 40, 5"),
            "shopping_list": ("[('flour', 1), ('egg', 2), ('basil', 3)], ['egg']", "[], []"),
            "timer_label": ("90", "45", "125"),
        },
    ),
]
