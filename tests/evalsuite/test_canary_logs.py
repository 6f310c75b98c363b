"""Canary inputs: the episodes/assignments logs (bad rows are located errors, never dropped) and the canary plan
(schema, freeze by hash, frozen before the first episode)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from canary_fixtures import PLAN_TOML, small_plan

from evalsuite.canary.logs import CanaryDataError, read_assignments, read_episodes
from evalsuite.canary.replay import write_jsonl
from evalsuite.canary.schema import CanaryAssignment, CanaryEpisode
from protocols.canary import check_before, freeze_canary_plan, load_canary_plan, load_frozen_canary
from protocols.load import ProtocolError

ROW = {"episode_id": "e1", "unit_id": "u1", "arm": "canary", "ts": "2026-03-02T10:00:00Z", "served_model": "m",
       "task_completed": True, "code_produced": True, "code_ran": False, "n_edits": 2, "rework": False,
       "feedback": None, "tool_calls": 5, "tool_errors": 1, "hallucination_reports": 0}  # fmt: skip


def write(tmp_path, rows, name="eps.jsonl"):
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


def test_round_trip_through_write_jsonl(tmp_path):
    e = CanaryEpisode.model_validate_json(json.dumps(ROW))
    p = write_jsonl([e], tmp_path / "x.jsonl")
    assert '"ts":"2026-03-02T10:00:00Z"' in p.read_text()
    assert read_episodes(p) == (e,)


@pytest.mark.parametrize("change, expect", [
    ({"task_completed": 1}, ["field task_completed", "write JSON true or false"]),
    ({"n_edits": "2"}, ["field n_edits", "write a JSON integer"]),
    ({"ts": "2026-03-02T10:00:00"}, ["field ts", "trailing Z"]),
    ({"ts": "1772445600"}, ["field ts", "not an ISO 8601 date and time", "not read as Unix seconds"]),
    ({"ts": 1772445600}, ["field ts", "valid datetime"]),
    ({"ts": "2026-02-30T10:00:00Z"}, ["field ts", "not an ISO 8601 date and time"]),
    ({"arm": "treatment"}, ["field arm", "allowed values"]),
    ({"colour": "red"}, ["field colour", "unknown field"]),
    ({"tool_errors": 9}, ["tool_errors <= tool_calls"]),
    ({"code_produced": False}, ["code_ran must be"]),
    ({"feedback": "meh"}, ["field feedback"]),
])  # fmt: skip
def test_bad_rows_name_file_line_field_and_fix(tmp_path, change, expect):
    p = write(tmp_path, [ROW, {**ROW, "episode_id": "e2", **change}])
    with pytest.raises(CanaryDataError) as exc:
        read_episodes(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}:2:") and all(e in msg for e in expect), msg


def test_missing_field_and_bad_json(tmp_path):
    row = dict(ROW)
    del row["rework"]
    with pytest.raises(CanaryDataError, match=r":1: field rework: Field required; add the field"):
        read_episodes(write(tmp_path, [row]))
    with pytest.raises(CanaryDataError, match=r":2: not valid JSON"):
        read_episodes(write(tmp_path, [ROW, "{oops"]))
    with pytest.raises(CanaryDataError, match="empty"):
        read_episodes(write(tmp_path, [""]))


def test_duplicates_and_non_sticky_units(tmp_path):
    with pytest.raises(CanaryDataError, match=r":2: field episode_id: 'e1' repeats line 1"):
        read_episodes(write(tmp_path, [ROW, ROW]))
    with pytest.raises(CanaryDataError, match=r":2: field arm: unit 'u1' is 'control' here but 'canary' at line 1"):
        read_episodes(write(tmp_path, [ROW, {**ROW, "episode_id": "e2", "arm": "control"}]))


def test_episodes_are_checked_against_assignments(tmp_path):
    a = write(tmp_path, [{"unit_id": "u1", "arm": "canary", "assign_ts": "2026-03-02T09:00:00Z"}], "a.jsonl")
    asg = read_assignments(a)
    assert asg == (CanaryAssignment(unit_id="u1", arm="canary", assign_ts=datetime(2026, 3, 2, 9, tzinfo=UTC)),)
    with pytest.raises(CanaryDataError, match="not in the assignments log"):
        read_episodes(write(tmp_path, [{**ROW, "unit_id": "u9"}]), assignments=asg, assignments_path=a)
    with pytest.raises(CanaryDataError, match="before unit 'u1'.s assignment"):
        read_episodes(write(tmp_path, [{**ROW, "ts": "2026-03-02T08:00:00Z"}]), assignments=asg, assignments_path=a)
    with pytest.raises(CanaryDataError, match="assigns unit 'u1' to 'canary'"):
        read_episodes(write(tmp_path, [{**ROW, "arm": "control"}]), assignments=asg, assignments_path=a)
    with pytest.raises(CanaryDataError, match="already assigned at line 1"):
        read_assignments(write(tmp_path, [{"unit_id": "u1", "arm": "canary", "assign_ts": "2026-03-02T09:00:00Z"}] * 2,
                               "b.jsonl"))  # fmt: skip


# ---- the plan ---------------------------------------------------------------------------------------------------


def test_bundled_plan_loads_and_freezes_by_hash(tmp_path):
    plan = load_canary_plan(PLAN_TOML)
    assert plan.primary().name == "task_completion" and plan.canary_share == 0.1
    rec = freeze_canary_plan(PLAN_TOML, out=tmp_path / "f.json", now="2026-03-01T00:00:00Z")
    again = freeze_canary_plan(PLAN_TOML, out=tmp_path / "f.json", now="2026-03-05T00:00:00Z")
    assert again.frozen_at == rec.frozen_at and again.sha256 == rec.sha256 == load_frozen_canary(tmp_path / "f.json").sha256
    changed = small_plan(alpha_promote=0.05)
    with pytest.raises(ProtocolError, match="already holds a frozen canary plan"):
        freeze_canary_plan(changed, out=tmp_path / "f.json")
    text = (tmp_path / "f.json").read_text().replace('"canary_share": 0.1', '"canary_share": 0.2')
    (tmp_path / "g.json").write_text(text)
    with pytest.raises(ProtocolError, match="edited after freezing"):
        load_frozen_canary(tmp_path / "g.json")


def test_plan_must_be_frozen_before_the_first_episode():
    rec = freeze_canary_plan(small_plan(), now="2026-03-02T00:00:00Z")
    check_before(rec, datetime(2026, 3, 2, 1, tzinfo=UTC), source="log")
    with pytest.raises(ProtocolError, match="must be frozen before its first episode"):
        check_before(rec, datetime(2026, 3, 1, 23, tzinfo=UTC), source="log")


@pytest.mark.parametrize("change, expect", [
    ({"marign": 1}, "marign: unknown key"),
    ({"metrics": [{"name": "a", "numerator": "rework", "direction": "lower_is_better", "anticipated_unit_var": 1}]},
     "exactly one metric needs role = 'primary'"),
    ({"canary_model": "prod-current"}, "must differ"),
    ({"method": "gst", "on_horizon_inconclusive": "extend"}, "only with method = 'msprt'"),
])  # fmt: skip
def test_plan_errors_name_the_field(tmp_path, change, expect):
    import tomllib

    data = {**tomllib.loads(PLAN_TOML.read_text()), **change}
    with pytest.raises(ProtocolError, match=expect):
        small_plan(**{k: v for k, v in data.items() if k in change})
    p = tmp_path / "p.toml"
    p.write_text(PLAN_TOML.read_text().replace("margin = 0.02                      # same", "margin_type = 'relative'\nmargin = 0.02  # same"))
    with pytest.raises(ProtocolError, match="relative margin needs margin in .0, 1. and baseline"):
        load_canary_plan(p)


def test_served_model_must_be_one_of_the_plans_models_when_given(tmp_path):
    p = write(tmp_path, [{**ROW, "served_model": "tg-candidate"}, {**ROW, "episode_id": "e2", "served_model": None},
                         {**ROW, "episode_id": "e3", "served_model": "prod-current"}])  # fmt: skip
    models = {"control": "prod-current", "canary": "tg-candidate"}
    assert len(read_episodes(p, models=models)) == 3  # the other arm's model is crossover, not an input error
    q = write(tmp_path, [{**ROW, "served_model": "tg-candidate"}, {**ROW, "episode_id": "e2", "served_model": "v2"}],
              "q.jsonl")  # fmt: skip
    with pytest.raises(CanaryDataError, match=r":2: field served_model: 'v2' is neither the plan's control_model"):
        read_episodes(q, models=models)
    assert len(read_episodes(q)) == 2  # without the plan's names nothing to check


def test_a_field_given_twice_on_a_line_is_an_error_not_the_last_value(tmp_path):
    """Before, ``{"task_completed": true, ..., "task_completed": false}`` was read as false without a word (JSON
    parsers keep the last value), so a botched export could flip outcomes silently."""
    line = json.dumps(ROW)[:-1] + ', "task_completed": false}'
    with pytest.raises(CanaryDataError, match=r":2: field task_completed: given twice on this line"):
        read_episodes(write(tmp_path, [ROW, line.replace('"e1"', '"e2"')]))
    a = '{"unit_id": "u1", "arm": "canary", "arm": "control", "assign_ts": "2026-03-02T09:00:00Z"}'
    with pytest.raises(CanaryDataError, match=r":1: field arm: given twice"):
        read_assignments(write(tmp_path, [a], "a.jsonl"))


def test_look_times_are_utc_whatever_offset_the_log_uses(tmp_path):
    """The same instants written with +05:00 offsets gave look times 5 hours late, labelled Z (table.start kept the
    log's offset and looks were formatted with a literal Z)."""
    from evalsuite.canary import aggregate
    from evalsuite.canary.monitor import monitor

    rows = [{**ROW, "episode_id": f"e{i}", "unit_id": f"u{i}", "arm": "canary" if i % 2 else "control",
             "served_model": None, "ts": f"2026-03-02T{1 + i % 10:02d}:00:00Z"} for i in range(20)]  # fmt: skip
    shifted = [{**r, "ts": f"2026-03-02T{int(r['ts'][11:13]) + 5:02d}:00:00+05:00"} for r in rows]
    plan = small_plan(canary_share=0.5)
    a = monitor(plan, aggregate.build_table(read_episodes(write(tmp_path, rows, "z.jsonl")), plan))
    b = monitor(plan, aggregate.build_table(read_episodes(write(tmp_path, shifted, "p5.jsonl")), plan))
    assert [lk.as_of for lk in a] == [lk.as_of for lk in b] == ["2026-03-02T10:00:00Z"]


def test_iso_timestamps_with_any_offset_or_a_space_still_parse(tmp_path):
    """The digits-in-a-string check (``"1772445600"`` was read as Unix seconds) keeps every ISO 8601 form."""
    rows = [{**ROW, "episode_id": f"e{i}", "ts": t} for i, t in enumerate(
        ["2026-03-02T10:00:00Z", "2026-03-02T15:00:00+05:00", "2026-03-02 10:00:00.5Z", "2026-03-02t10:00:00z"])]
    got = [e.ts.astimezone(UTC) for e in read_episodes(write(tmp_path, rows))]
    t0 = datetime(2026, 3, 2, 10, tzinfo=UTC)
    assert got == [t0, t0, t0.replace(microsecond=500000), t0]
    a = {"unit_id": "u1", "arm": "canary", "assign_ts": "1772445600"}
    with pytest.raises(CanaryDataError, match=r":1: field assign_ts: .*not read as Unix seconds"):
        read_assignments(write(tmp_path, [a], "a.jsonl"))
