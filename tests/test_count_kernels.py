"""scripts/count_kernels.py's reading of optimized HLO, on a hand-written module whose launches
are counted here by hand."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from count_kernels import loop_counts  # noqa: E402

HLO = """HloModule m

%fused_a (p: f32[4]) -> f32[4] {
  %p = f32[4] parameter(0)
  ROOT %n = f32[4] negate(%p)
}

%inner_body (t: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[4] get-tuple-element(%t), index=1
  %one = s32[] constant(1)
  %j = s32[] add(%i, %one)
  %y = f32[4] fusion(%x), kind=kLoop, calls=%fused_a
  ROOT %r = (s32[], f32[4]) tuple(%j, %y)
}

%inner_cond (t: (s32[], f32[4])) -> pred[] {
  %t = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%branch_small (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  ROOT %e = f32[4] exponential(%x)
}

%branch_big (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %a = f32[4] exponential(%x)
  ROOT %b = f32[4] log(%a)
}

%outer_body (t: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[4] get-tuple-element(%t), index=1
  %w = (s32[], f32[4]) while(%t), condition=%inner_cond, body=%inner_body, backend_config={"known_trip_count":{"n":"3"}}
  %y = f32[4] get-tuple-element(%w), index=1
  %c = f32[4] custom-call(%y), custom_call_target="kernel"
  %p = pred[] constant(true)
  %z = f32[4] conditional(%p, %c, %c), branch_computations={%branch_small, %branch_big}
  %one = s32[] constant(1)
  %j = s32[] add(%i, %one)
  ROOT %r = (s32[], f32[4]) tuple(%j, %z)
}

%outer_cond (t: (s32[], f32[4])) -> pred[] {
  %t = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(10)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4] parameter(0)
  %zero = s32[] constant(0)
  %t = (s32[], f32[4]) tuple(%zero, %a)
  %w = (s32[], f32[4]) while(%t), condition=%outer_cond, body=%outer_body
  ROOT %out = f32[4] get-tuple-element(%w), index=1
}
"""


def test_loop_bodies_count_work_not_plumbing_and_nested_loops_count_per_trip():
    loops = loop_counts(HLO)
    assert [loop["depth"] for loop in loops] == [0, 1, 2]
    entry, outer, inner = loops
    assert entry["kernels_per_trip"] == 0  # parameter, constant, tuple, get-tuple-element
    assert (inner["body_kernels"], inner["condition_kernels"], inner["trip_count"]) == (2, 1, 3)  # add, fusion
    # custom-call, the conditional (its predicate and its larger branch: 2), add; the inner loop
    # 3 trips of 3 launches
    assert (outer["body_kernels"], outer["condition_kernels"], outer["trip_count"]) == (5, 1, None)
    assert outer["kernels_per_trip"] == 5 + 1 + 3 * 3
