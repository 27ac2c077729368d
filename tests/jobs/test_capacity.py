"""One driver's capacity (jobs/sim/capacity.py): projected from what a sweep point measured.

The point runs for real: the driver, Ray (local), `ReplayEngine` actors answering a scripted
recording after a latency model's times. The test checks that every input of the projection is that
point's measurement, the latency model's step times or the recording's step shape, never a constant.
"""

from __future__ import annotations

import copy
import math

import pytest
from memloop.jobs.run.config import parse_config
from memloop.jobs.sim.capacity import CapacityError, capacity, capacity_table, max_hosts, round_s, step_shape
from memloop.jobs.sim.replay import LatencyModel, tokenizer_json
from memloop.jobs.sim.scale_sim import Recording, run_point

from tests.jobs.test_scale import _config, _scripted_recording

# long modelled steps (12 decoded tokens x ~50 ms), so a loaded test host still runs them as modelled
# the shared test host may run the point slower than modelled; the inputs' provenance does not depend on it
LOADED = 10.0
LATENCY = LatencyModel(prefill_s_per_token=1e-3, decode_s_base=0.05, decode_s_per_seq=1e-3, max_batch=4)


@pytest.fixture(scope="module")
def measured(ray_local, tmp_path_factory) -> tuple[dict, Recording]:
    cfg = _config(tmp_path_factory.mktemp("cap") / "out", "driver", judges=[])
    answers = _scripted_recording(cfg)
    rec = Recording("mem://scripted", parse_config(cfg), answers, len(answers), 2)  # 2 entities x 1 method
    row = run_point(
        rec,
        LATENCY,
        ray_local.put(tokenizer_json()),
        ray_local.put(answers),
        1,
        2,
        "driver",
        3.0,
        str(tmp_path_factory.mktemp("points")),
        lambda m: None,
        processes=1,
    )
    assert row["units"] > 0 and row["steps_per_s"] > 0, row
    result = {
        "rows": [row],
        "latency_model": LATENCY.to_dict(),
        "step_shape": step_shape(list(answers.values()), rec.steps, rec.units),
    }
    return result, rec


def test_the_projection_stands_on_the_measured_point_the_latency_model_and_the_recording(measured) -> None:
    result, rec = measured
    row = result["rows"][0]
    cap = capacity(result, trusted_dilation=LOADED)
    drv = cap["inputs"]["driver"]["driver"]
    assert drv["point"].startswith("1x2 driver")
    # the driver's whole measured CPU over the point, attributed to its steps and its units
    steps = row["steps_per_s"] * row["wall_s"]
    assert drv["cpu_s_per_step"] * steps + drv["cpu_s_per_unit"] * row["units"] == pytest.approx(
        row["driver_cpu"] * row["wall_s"]
    )
    assert drv["cpu_s_per_step"] > 0
    # the step's shape is the recording's (scripted: 40 prompt tokens, 10 of them cached, 12 decoded)
    assert cap["inputs"]["step_shape"] == {
        "prompt_tokens_uncached": 30.0,
        "decoded_tokens": 12.0,
        "steps_per_unit": rec.steps / rec.units,
    }
    # the round is the latency model's: prefill of each loop's step, decode steps at the batch
    r8 = cap["rows"][0]
    assert r8["loops"] == 8 and r8["round_s"] == pytest.approx(
        8 * LATENCY.prefill_s(30) + 2 * 12 * LATENCY.decode_step_s(4)
    )
    c = drv["cpu_s_per_step"] + drv["cpu_s_per_unit"] / (rec.steps / rec.units)
    assert r8["hosts_driver"] == max_hosts(c, r8["round_s"], 8)
    assert "CAPACITY of one driver" in capacity_table(cap) and "measured at 1x2 driver" in capacity_table(cap)


def test_a_costlier_driver_sustains_fewer_hosts_and_an_unmeasured_sweep_projects_nothing(measured) -> None:
    result, _ = measured
    slower = copy.deepcopy(result)
    slower["rows"][0]["driver_cpu"] *= 4  # the same point, had the driver spent four times the CPU
    base, costly = capacity(result, trusted_dilation=LOADED), capacity(slower, trusted_dilation=LOADED)
    assert all(b["hosts_driver"] <= a["hosts_driver"] for a, b in zip(base["rows"], costly["rows"]))
    assert sum(b["hosts_driver"] for b in costly["rows"]) < sum(a["hosts_driver"] for a in base["rows"])
    unmeasured = copy.deepcopy(result)
    unmeasured["rows"][0]["engine_dilation"] = 2.0  # the machine, not the design, set this point's pace
    with pytest.raises(CapacityError, match="no point of the sweep ran as modelled"):
        capacity(unmeasured)  # the default trust: dilation <= 1.25


def test_the_busy_bound_of_the_method() -> None:
    """c / (1 - rho) <= R / 9 at the largest H, and not at H + 1."""
    c, r, loops = 0.002, 1.0, 32
    h = max_hosts(c, r, loops)

    def response(hosts: int) -> float:
        rho = hosts * loops * c / r
        return math.inf if rho >= 1 else c / (1 - rho)

    assert response(h) <= r / 9 < response(h + 1)
    assert max_hosts(0.2, 1.0, 8) == 0  # one step's driver work alone is more than a ninth of the round
    assert round_s(
        LATENCY, 8, {"prompt_tokens_uncached": 0, "decoded_tokens": 1, "steps_per_unit": 1}
    ) == pytest.approx(2 * LATENCY.decode_step_s(4))
