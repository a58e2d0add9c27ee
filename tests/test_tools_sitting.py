"""tools/sitting.py: the order of a sitting's processes, the table it builds, --resume, and
one real graphc-only run. The fakes stand in for the peers' processes: no peers, no timing."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import sitting  # noqa: E402

PEAK, COPY = 200.0, 20.0  # GFLOP/s and GB/s of the fake machine


def record(system, workload, ms, **extra):
    return dict(system=system, workload=workload, median_ms=ms, load_before=1.0,
                load_after=1.5, process_wall_s=3.0, **extra)


class FakeProcesses:
    """measure(system, workload) from a table of medians per (workload, system), one value
    per call in turn; remembers the calls."""

    def __init__(self, medians):
        self.medians = {k: list(v) for k, v in medians.items()}
        self.calls = []

    def __call__(self, system, workload):
        self.calls.append((workload, system))
        return record(system, workload, self.medians[workload, system].pop(0))


def test_full_sitting_interleaves_systems_per_workload_and_reverses_odd_reps():
    order = []

    def run(w, s, rep):
        order.append((w, s, rep))
        return record(s, w, 1.0)

    for w in ("softmax_xent", "lstm_train"):
        sitting.sit_workload(w, ["tf1", "torch", "graphc"], 3, False, run)
    expected = []
    for w in ("softmax_xent", "lstm_train"):
        expected += [(w, "tf1", 0), (w, "torch", 0), (w, "graphc", 0),
                     (w, "graphc", 1), (w, "torch", 1), (w, "tf1", 1),
                     (w, "tf1", 2), (w, "torch", 2), (w, "graphc", 2)]
    assert order == expected


def test_quick_sitting_reruns_graphc_and_the_fastest_peer_alternated():
    order = []
    first_round = {"tf1": 9.0, "jax": 4.0, "torch": 5.0, "graphc": 6.0}

    def run(w, s, rep):
        order.append((s, rep))
        return record(s, w, first_round[s])

    records = sitting.sit_workload("transformer_train", ["tf1", "jax", "torch", "graphc"],
                                   2, True, run)
    assert order == [("tf1", 0), ("jax", 0), ("torch", 0), ("graphc", 0),
                     ("graphc", 1), ("jax", 1), ("jax", 2), ("graphc", 2)]
    assert len(records) == 8


def test_quick_sitting_without_a_timed_peer_runs_one_round():
    def run(w, s, rep):
        return record(s, w, None, error="rc=1") if s != "graphc" else record(s, w, 1.0)

    records = sitting.sit_workload("mlp_train", ["torch", "graphc"], 3, True, run)
    assert [(r["system"]) for r in records] == ["torch", "graphc"]


def fake_state(runs):
    machine = lambda peak, copy: {"gemm_fp32_GFLOPs_by_threads": {
        "1024x1024x1024": {"2t_best": peak}}, "copy_GBps_rw": copy}
    return {"options": {"reps": 2, "mode": "full"}, "runs": runs,
            "machine_start": machine(PEAK * 0.8, COPY), "machine_end": machine(PEAK, COPY / 2)}


def table_row(text, name):
    rows = [line for line in text.splitlines() if line.startswith(f"| {name}")]
    assert len(rows) == 1, text
    return [c.strip() for c in rows[0].strip("|").split("|")]


def test_table_takes_best_of_reps_ratios_and_shares_of_the_peak():
    flops = {"lstm_train": 3.7e9, "elementwise": None, "tiny_overhead": None}.get
    runs = []
    for rep, (tf1, torch, graphc) in enumerate([(50.0, 30.0, 40.0), (45.0, 20.0, 36.0),
                                                (60.0, 25.0, 20.0)]):
        runs += [dict(record("tf1", "lstm_train", tf1), rep=rep),
                 dict(record("torch", "lstm_train", torch), rep=rep),
                 dict(record("graphc", "lstm_train", graphc), rep=rep)]
    runs[0]["load_before"] = 0.5
    runs[-1]["load_after"] = 3.25
    runs += [dict(record("tf1", "elementwise", 2.0), rep=0),
             dict(record("torch", "elementwise", None, error="rc=1: boom"), rep=0),
             dict(record("graphc", "elementwise", 1.6), rep=0),
             dict(record("tf1", "tiny_overhead", None, supported=False), rep=0),
             dict(record("graphc", "tiny_overhead", 0.00512), rep=0)]
    text, summary = sitting.build_table(fake_state(runs), ["lstm_train", "elementwise",
                                                           "tiny_overhead"],
                                        ["tf1", "torch", "graphc"], flops)
    lstm = table_row(text, "lstm_train")
    # graphc best 20 / torch best 20 = 1.00x (past 0.9x); medians 36 / 25
    # a tie is the first system's bold
    assert lstm[:4] == ["lstm_train (3.7 GFLOP)", "45.00", "**20.00**", "20.00"]
    assert lstm[4] == "1.00x ✗"
    assert lstm[5] == f"{36.0 / 25.0:.2f}x ✗"
    share = 100 * 3.7e9 / 20e-3 / 1e9 / PEAK  # the higher of the two peaks
    assert lstm[6] == f"graphc {share:.0f}%, torch {share:.0f}%"
    assert lstm[7] == "0.5-3.2"
    assert summary["lstm_train"]["graphc"]["rep_medians_ms"] == [40.0, 36.0, 20.0]
    assert summary["lstm_train"]["graphc"]["median_ms"] == 36.0

    w1 = table_row(text, "W1 elementwise")
    gbps = 4 * 4 * (1 << 22) / 1.6e-3 / 1e9
    assert w1[1:] == ["2.00", "ERR", "**1.60**", "0.80x", "0.80x",
                      f"{gbps:.1f} GB/s ({gbps / COPY:.2f}x copy)", "1.0-1.5"]
    w4 = table_row(text, "W4 tiny_overhead")
    assert w4[1:6] == ["—", "n/a", "**0.0051**", "—", "—"]
    assert "- elementwise / torch rep 0: rc=1: boom" in text
    assert "peak (1024^3, 2 threads) at start / end: 160.0 / 200.0 GFLOP/s" in text
    assert "share past 100%" not in text

    slow_minute = fake_state(runs)  # both peaks measured while the machine was loaded
    for machine in (slow_minute["machine_start"], slow_minute["machine_end"]):
        machine["gemm_fp32_GFLOPs_by_threads"]["1024x1024x1024"]["2t_best"] = PEAK / 4
    text, _ = sitting.build_table(slow_minute, ["lstm_train"], ["tf1", "torch", "graphc"],
                                  flops)
    assert table_row(text, "lstm_train")[6] == f"graphc {4 * share:.0f}%, torch {4 * share:.0f}%"
    assert "A share past 100%: the GEMM peak was measured in a slower minute" in text


def test_wall_time_of_a_sitting_still_running_is_the_span_of_its_runs(tmp_path):
    runs = [dict(record("tf1", "mlp_train", 1.0), started_at=100.0, rep=0),
            dict(record("graphc", "mlp_train", 1.0), started_at=104.0, rep=0)]
    state = {"options": {}, "runs": runs, "segments": []}
    assert sitting.Sitting(str(tmp_path / "s.json"), state).wall_s() == 104.0 + 3.0 - 100.0
    state["segments"] = [[0.0, 60.0], [100.0, 130.0]]
    assert sitting.Sitting(str(tmp_path / "s.json"), state).wall_s() == 90.0


def fake_main(monkeypatch, tmp_path, fake, *extra):
    monkeypatch.setattr(sitting, "measure", lambda s, w, args: fake(s, w))
    sitting.main(["--systems", "tf1,graphc", "--workloads", "mlp_train,lstm_train",
                  "--reps", "2", "--no-machine", "--peers-python", sys.executable,
                  "--outdir", str(tmp_path), *extra])
    with open(tmp_path / "sitting.json") as f:
        return json.load(f)


def test_resume_reuses_finished_runs_and_reruns_failed_ones(monkeypatch, tmp_path, capsys):
    medians = {("mlp_train", "tf1"): [5.0, 4.0], ("mlp_train", "graphc"): [3.0, 2.0],
               ("lstm_train", "tf1"): [50.0, 40.0], ("lstm_train", "graphc"): [30.0, 20.0]}
    first = FakeProcesses(medians)

    def interrupted(system, workload):
        if len(first.calls) == 5:  # lstm_train's first graphc run
            raise KeyboardInterrupt
        if len(first.calls) == 2:  # mlp_train's second graphc run fails
            first.calls.append((workload, system))
            return record(system, workload, None, error="rc=1: out of memory")
        return first(system, workload)

    with pytest.raises(SystemExit, match="--resume continues"):
        fake_main(monkeypatch, tmp_path, interrupted)
    saved = json.loads((tmp_path / "sitting.json").read_text())
    assert [(r["workload"], r["system"], r["rep"]) for r in saved["runs"]] == [
        ("mlp_train", "tf1", 0), ("mlp_train", "graphc", 0), ("mlp_train", "graphc", 1),
        ("mlp_train", "tf1", 1), ("lstm_train", "tf1", 0)]

    sitting.main(["--outdir", str(tmp_path), "--retable"])  # the table so far
    assert table_row((tmp_path / "sitting.md").read_text(), "W3 mlp_train")[1:4] == [
        "4.00", "**3.00**", "0.75x"]

    with pytest.raises(SystemExit, match="exists: --resume continues it"):
        fake_main(monkeypatch, tmp_path, first)
    with pytest.raises(SystemExit, match=r"--min-time \(2.0, now 0.5\)"):
        fake_main(monkeypatch, tmp_path, first, "--resume", "--min-time", "0.5")

    second = FakeProcesses({("mlp_train", "graphc"): [2.5], ("lstm_train", "graphc"): [30.0, 20.0],
                            ("lstm_train", "tf1"): [40.0]})
    done = fake_main(monkeypatch, tmp_path, second, "--resume")
    assert second.calls == [("mlp_train", "graphc"), ("lstm_train", "graphc"),
                            ("lstm_train", "graphc"), ("lstm_train", "tf1")]
    kept = {(r["workload"], r["system"], r["rep"]): r["median_ms"] for r in done["runs"]}
    assert kept == {("mlp_train", "tf1", 0): 5.0, ("mlp_train", "graphc", 0): 3.0,
                    ("mlp_train", "graphc", 1): 2.5, ("mlp_train", "tf1", 1): 4.0,
                    ("lstm_train", "tf1", 0): 50.0, ("lstm_train", "graphc", 0): 30.0,
                    ("lstm_train", "graphc", 1): 20.0, ("lstm_train", "tf1", 1): 40.0}
    assert done["summary"]["mlp_train"]["graphc"]["best_ms"] == 2.5
    assert len(done["segments"]) == 2
    assert "| lstm_train (" in (tmp_path / "sitting.md").read_text()


def test_bad_options_name_the_option(capsys):
    for argv, message in [(["--systems", "tf1,mxnet"], "--systems: 'mxnet'"),
                          (["--workloads", "w9"], "--workloads: 'w9'"),
                          (["--systems", "torch"], "--peers-python is needed"),
                          (["--systems", "graphc", "--reps", "0"], "--reps: 0")]:
        with pytest.raises(SystemExit):
            sitting.parse_args(argv)
        assert message in capsys.readouterr().err


def test_a_graphc_only_sitting_on_w4_writes_its_json_and_table(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, GRAPHC_CACHE_DIR="off")
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "sitting.py"), "--systems", "graphc",
         "--workloads", "tiny_overhead", "--reps", "1", "--no-machine", "--min-iters", "5",
         "--min-time", "0.05", "--warmup-time", "0", "--outdir", str(out)],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    state = json.loads((out / "sitting.json").read_text())
    (run,) = state["runs"]
    assert run["system"] == "graphc" and run["workload"] == "tiny_overhead"
    assert run["median_ms"] > 0 and run["iters"] >= 5
    assert run["check"] == 7.0  # x*2+1 at peers_bench's x = 3
    assert state["summary"]["tiny_overhead"]["graphc"]["best_ms"] == run["median_ms"]
    row = table_row((out / "sitting.md").read_text(), "W4 tiny_overhead")
    assert row[1] == f"**{sitting.fmt_ms(run['median_ms'])}**"
    assert row[1] in done.stdout
