"""``recompprof history compare``, the CI gate, measured on real runs: thirty runs of one small CPU job with
random input shapes (tests/workloads/gate_noise.py, one process, recorded once), exported by the real
command. Each ordinary run held to the runs before it must pass (no finding on noise); each run that adds
a steady cause, or recompiles for one cause x1.5, must fail. The same lake answers the routing questions
(filters, ``--by frame``, the fix hint and an example run per cause)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from needs import starts
from parquet_damage import flip_a_value
from recordings import Workload, copy_into, record_one

from recompprof._cli.main import main
from recompprof._history import questions

WORKLOAD = Path(__file__).parent / "workloads" / "gate_noise.py"
NORMAL, NEW_CAUSE, MORE = 25, 3, 3  # 20 of the 25 held to a full baseline (MIN_BASELINE)


@pytest.fixture(scope="module")
@starts("workload")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job's run directories (``normal-NN``, ``new-cause-NN``, ``more-NN``), recorded once."""
    workload = Workload(
        WORKLOAD, ("run", f"normal:{NORMAL}", f"new-cause:{NEW_CAUSE}", f"more:{MORE}"), timeout=600
    )
    recording = record_one(workload)
    assert recording.returncode == 0, recording.failure(workload)
    return copy_into(recording, tmp_path_factory.mktemp("gate")).run_dir


def _export(lake: Path, *run_dirs: Path) -> None:
    assert main(["export", *map(str, run_dirs), "--to", str(lake)]) == 0


@pytest.fixture(scope="module")
def lake(runs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ordinary runs only, in one lake."""
    root = tmp_path_factory.mktemp("gate-lake") / "lake"
    _export(root, *sorted(runs.glob("normal-*")))
    return root


def compare(
    capsys: pytest.CaptureFixture[str], lake: Path, run: str, *extra: str
) -> tuple[int, dict, str]:
    code = main(["history", "compare", run, "--lake", str(lake), "--format", "json", *extra])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def test_the_gate_stays_quiet_on_noise(lake, capsys):
    """Every ordinary run of the job, held to the runs before it, passes: no finding in 25 runs whose
    size guard failures vary with random shapes (which, with no slack, do fail the gate); the first
    runs, with fewer earlier runs than the minimum baseline, pass with a note, and the JSON says how
    many runs each was held to."""
    false_findings = []
    for n in range(NORMAL):
        code, answer, err = compare(capsys, lake, f"gate-normal-{n:02d}")
        assert answer["baseline_runs"] == n
        if n < questions.MIN_BASELINE:
            assert code == 0 and not answer["findings"]
            assert (f"only {n} earlier" in err) if n else ("nothing to compare with" in err)
            continue
        if code != 0 or answer["findings"]:
            false_findings.append((n, [r["rows"] for r in answer["results"]]))
    # The noise is real: with no slack the same runs, held to a full baseline, fail the gate.
    no_slack = ("--max-failure-increase", "0", "--max-failure-increase-pct", "0")
    failed = [
        n
        for n in range(questions.MIN_BASELINE, NORMAL)
        if compare(capsys, lake, f"gate-normal-{n:02d}", *no_slack)[0] == 1
    ]
    gated = NORMAL - questions.MIN_BASELINE
    with capsys.disabled():
        print(
            f"\ngate on {gated} runs: {len(false_findings)} false findings; {len(failed)} with no slack"
        )
    assert false_findings == [] and failed


@pytest.fixture(scope="module")
def regressed(runs: Path, lake: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each regressed run in a copy of the ordinary runs' lake of its own (so it is held to them only)."""
    out = {}
    for run_dir in sorted([*runs.glob("new-cause-*"), *runs.glob("more-*")]):
        own = tmp_path_factory.mktemp(run_dir.name) / "lake"
        shutil.copytree(lake, own)
        _export(own, run_dir)
        out[run_dir.name] = own
    return out


@pytest.mark.parametrize(
    ("kind", "count", "frame", "category"),
    [
        ("new-cause", NEW_CAUSE, "penalty", "global"),
        ("more", MORE, "Head.forward", "module_attribute"),
    ],
)
def test_the_gate_finds_a_real_regression_every_time(
    regressed, capsys, kind, count, frame, category
):
    """A run that adds a steady cause (a global changed in four steps) or recompiles one cause x1.5
    (the head's attribute through 12 values, not 8) fails the gate every time, the regression its
    finding, held to all the ordinary runs."""
    for n in range(count):
        code, answer, _ = compare(capsys, regressed[f"{kind}-{n:02d}"], f"gate-{kind}-{n:02d}")
        rows = answer["results"][0]["rows"]
        assert code == 1 and answer["baseline_runs"] == NORMAL
        assert [(r["frame_name"], r["category"]) for r in rows] == [(frame, category)]
        assert rows[0]["this_run"] > rows[0]["allowed"] >= rows[0]["baseline_max"]


def test_the_summary_shows_the_worst_first_and_counts_the_rest(regressed, capsys):
    """With no slack, held to one run, every excess is a finding: they come worst first (the
    regression before the noise), and --top 1 keeps the worst and says how many there are in all, in
    the notes, the verdict and the JSON."""
    no_slack = (
        *("--max-failure-increase", "0", "--max-failure-increase-pct", "0"),
        *("--min-baseline", "1", "--baseline", "last:1"),
    )
    found = {}
    for name, lake in regressed.items():
        code, answer, _ = compare(capsys, lake, f"gate-{name}", *no_slack, "--top", "0")
        rows = answer["results"][0]["rows"]
        excess = [r["this_run"] - r["allowed"] for r in rows]
        assert code == 1 and excess == sorted(excess, reverse=True)
        if len(rows) > 1:
            found[name] = rows
    assert found, "no regressed run had a noise excess besides its regression"
    name, rows = next(iter(found.items()))
    assert rows[0]["frame_name"] in {"penalty", "Head.forward"}
    code, answer, err = compare(capsys, regressed[name], f"gate-{name}", *no_slack, "--top", "1")
    result = answer["results"][0]
    assert code == 1 and result["rows"] == rows[:1] and result["total_rows"] == len(rows)
    assert f"the worst 1 of {len(rows)} shown" in err
    argv = ["history", "compare", f"gate-{name}", "--lake", str(regressed[name]), *no_slack]
    code = main([*argv, "--top", "1"])
    out = capsys.readouterr().out
    assert code == 1 and f"{len(rows)} finding(s) against 1 run(s)" in out


# ---- history verify: a page broken behind a good footer -------------------------------------------


QUESTIONS = [
    ["top-causes", "--all"],
    ["cost"],
    ["latency"],
    ["limit-hits"],
    ["divergence"],
    ["sql", "SELECT COUNT(*) AS n FROM guard_failures"],
]


def test_verify_names_each_bad_file_and_every_question_leaves_them_out(
    runs, lake, tmp_path, capsys
):
    """Export writes page checksums, so `history verify` finds a flipped byte that decodes silently;
    it names each bad file with its own column and reason (exit 1), and from then on every question
    leaves out the same files and says so, each with its reason, counting the rest; a file exported
    anew is read again."""
    own = tmp_path / "lake"
    shutil.copytree(lake, own)
    bad_compiles = next((own / "v1" / "compiles").rglob("gate-normal-03__*.parquet"))
    bad_guards = next((own / "v1" / "guard_failures").rglob("gate-normal-07__*.parquet"))
    flip_a_value(bad_compiles, "duration_s")
    flip_a_value(bad_guards, "text")
    code = main(["history", "verify", "--lake", str(own)])
    out, err = capsys.readouterr()
    assert code == 1 and "2 bad" in out
    assert f"{bad_compiles.name} is bad: column duration_s: " in err
    assert f"{bad_guards.name} is bad: column text: " in err
    good = [p for p in (own / "v1" / "compiles").rglob("*.parquet") if p != bad_compiles]
    expected_hours = sum(pc.sum(pq.read_table(p)["compile_s"]).as_py() for p in good) / 3600
    for question in QUESTIONS:
        argv = ["history", question[0], "--lake", str(own), "--format", "json", *question[1:]]
        code = main([*argv, *([] if question[0] == "sql" else ["--since", "3000d"])])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        warned = [w for w in json.loads(captured.out)["warnings"] if "history verify" in w]
        assert len(warned) == 2, (question, warned)
        assert any(f"{bad_compiles.name} (column duration_s: " in w for w in warned)
        assert any(f"{bad_guards.name} (column text: " in w for w in warned)
        if question[0] == "cost":
            rows = json.loads(captured.out)["results"][0]["rows"]
            assert sum(r["compile_hours"] for r in rows) == pytest.approx(expected_hours, abs=1e-5)
    _export(own, runs / "normal-03")  # written anew: no longer the file verify found bad
    main(["history", "cost", "--lake", str(own), "--since", "3000d"])
    err = capsys.readouterr().err
    assert bad_compiles.name not in err and bad_guards.name in err
