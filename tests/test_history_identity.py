"""A run's identity in the lake, and a rank session counted once whichever way it arrived: real
2-rank torchrun jobs (gloo, CPU, eager) launched without a run id, exported whole, per rank and from a
partial run folder (docs/history.md, "Identity")."""

from __future__ import annotations

import datetime
import json
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

duckdb = pytest.importorskip("duckdb")
pq = pytest.importorskip("pyarrow.parquet")

from lake_sql import sql  # noqa: E402
from needs import starts  # noqa: E402
from rank_jobs import TORCHRUN, job_env  # noqa: E402
from recorded_runs import cli  # noqa: E402
from servers import free_port  # noqa: E402

from recompprof._analysis.report.fold import build_report  # noqa: E402
from recompprof._analysis.runs import load  # noqa: E402
from recompprof._capture.identity import run_folder  # noqa: E402
from recompprof._history import compact  # noqa: E402
from recompprof._history.layout import Lake  # noqa: E402
from recompprof._history.sessions import base_of  # noqa: E402
from recompprof._history.tables import TABLES  # noqa: E402
from recompprof._model.events import MAX_SUBJECT  # noqa: E402
from recompprof._model.naming import as_text, shortened  # noqa: E402

WORKLOAD = Path(__file__).parent / "workloads" / "ddp_diverge.py"
JOB_TIMEOUT = 300


@pytest.fixture(scope="module")
@starts("workload")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two 2-rank torchrun jobs launched side by side the default way (static rendezvous, no
    ``--rdzv-id``: torchelastic's run id ``none``), each in its own working directory, recompprof's
    run directory left at its default; their run directories."""
    where = tmp_path_factory.mktemp("none-jobs")
    procs = []
    for name, seed_rank in (("a", 1), ("b", 0)):
        cwd = where / name
        cwd.mkdir()
        command = [TORCHRUN, "--nproc-per-node=2", f"--master-port={free_port()}", str(WORKLOAD)]
        command += ["--steps", "4", "--diverge-step", "2", "--diverge-rank", str(seed_rank)]
        procs.append(
            subprocess.Popen(
                command,
                cwd=cwd,
                env=job_env({}),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    for proc in procs:
        out, _ = proc.communicate(timeout=JOB_TIMEOUT)
        assert proc.returncode == 0, out[-3000:]
    found = []
    for name in ("a", "b"):
        [run_dir] = (where / name / "recompprof-runs").iterdir()
        assert len(list(run_dir.glob("*.jsonl"))) == 2
        found.append(run_dir)
    return found


def _compiles(*paths: Path) -> int:
    """The compiles ``report`` counts over these runs (or logs)."""
    return sum(build_report(load(path).events).compiles for path in paths)


def _sessions(lake: Path) -> list[tuple[Any, ...]]:
    return sql(lake, "SELECT run_id, rank, pid FROM runs ORDER BY run_id, rank")


def _export(*args: str) -> subprocess.CompletedProcess[str]:
    done = cli("export", *args)
    assert done.returncode == 0, done.stderr
    return done


def _with_run_id(run_dir: Path, where: Path, run_id: str) -> Path:
    """A copy of ``run_dir`` whose sessions say ``run_id`` (as a log recorded before this release,
    under torchelastic's ``none``, says)."""
    where.mkdir(parents=True)
    for log in run_dir.glob("*.jsonl"):
        lines = log.read_text().splitlines(keepends=True)
        start = json.loads(lines[0])
        assert start["kind"] == "session_start"
        start["run_id"], start["job"] = (
            run_id,
            shortened(run_id, MAX_SUBJECT),
        )  # as the recorder writes them
        (where / log.name).write_text(json.dumps(start) + "\n" + "".join(lines[1:]))
    return where


def test_jobs_launched_without_a_run_id_get_their_own_run_ids(jobs: list[Path]) -> None:
    """Two torchrun jobs launched with torchelastic's run id ``none`` get two run ids (not ``none``),
    shared by each job's ranks: their run directories differ, and each exports to its own files, so
    one lake keeps every session and every compile of both."""
    ids = []
    for run_dir in jobs:
        starts = [json.loads(p.read_text().splitlines()[0]) for p in run_dir.glob("*.jsonl")]
        assert len({s["run_id"] for s in starts}) == 1
        ids.append(starts[0]["run_id"])
    assert len(set(ids)) == 2 and "none" not in ids and all(i.startswith("torchrun-") for i in ids)
    assert [p.name for p in jobs] == ids
    lake = jobs[0].parent.parent.parent / "lake-ids"
    for run_dir in jobs:
        _export(str(run_dir), "--to", str(lake))
    assert len(_sessions(lake)) == 4
    [(compiles,)] = sql(lake, "SELECT SUM(compiles) FROM runs")
    [(rows,)] = sql(lake, "SELECT COUNT(*) FROM compiles WHERE counts_as_compile")
    assert compiles == rows == _compiles(*jobs)


def test_two_jobs_logged_under_one_run_id_never_replace_each_other(
    jobs: list[Path], tmp_path: Path
) -> None:
    """Logs of two jobs that both say run id ``none`` (recorded before this release), exported one
    after the other into one lake: the second export writes files of its own sessions beside the
    first's, and both jobs' sessions and compiles stay."""
    copies = [_with_run_id(run, tmp_path / f"old-{i}", "none") for i, run in enumerate(jobs)]
    lake = tmp_path / "lake"
    for copy in copies:
        _export(str(copy), "--to", str(lake))
    files = Lake(str(lake)).files("compiles")
    assert len(files) == 2 and {f.run_part for f in files} == {"none"}
    assert len({f.writer for f in files}) == 2 and {base_of(f.writer) for f in files} == {"all"}
    assert len(_sessions(lake)) == 4
    [(compiles,)] = sql(lake, "SELECT SUM(compiles) FROM runs")
    [(rows,)] = sql(lake, "SELECT COUNT(*) FROM compiles WHERE counts_as_compile")
    assert compiles == rows == _compiles(*copies)


def test_a_file_of_other_sessions_at_the_exports_name_is_refused(
    jobs: list[Path], tmp_path: Path
) -> None:
    """Where the file an export would write already holds other sessions (here: job A's rows put under
    job B's name), the export refuses with one line and exit 2, writes nothing and deletes nothing."""
    first, second = (_with_run_id(run, tmp_path / f"old-{i}", "none") for i, run in enumerate(jobs))
    scratch, lake = tmp_path / "scratch", tmp_path / "lake"
    _export(str(second), "--to", str(scratch))
    _export(str(first), "--to", str(lake))
    [theirs] = Lake(str(scratch)).files("compiles")
    [mine] = Lake(str(lake)).files("compiles")
    target = Path(mine.path).parent / Path(theirs.path).name
    shutil.copyfile(mine.path, target)
    before = {p: p.read_bytes() for p in lake.rglob("*") if p.is_file()}
    done = cli("export", str(second), "--to", str(lake))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "holds 2 other session(s)" in line and "not replaced" in line and target.name in line
    assert {p: p.read_bytes() for p in lake.rglob("*") if p.is_file()} == before


def test_a_straggler_exported_per_rank_after_the_whole_run_is_counted_once(
    jobs: list[Path], tmp_path: Path
) -> None:
    """A run exported whole, then one rank's log exported on its own (a straggler's session-end export,
    a re-export of one log): that rank is in the lake once, its rows in its own file, and every table
    counts the run's compiles and sessions as ``report`` does."""
    run_dir, lake = jobs[0], tmp_path / "lake"
    _export(str(run_dir), "--to", str(lake))
    whole = [f for t in TABLES for f in Lake(str(lake)).files(t)]
    rank0 = sorted(run_dir.glob("rank00000-*.jsonl"))[0]
    done = _export(str(rank0), "--to", str(lake), "--per-rank")
    sessions = _sessions(lake)
    assert [s[1] for s in sessions] == [0, 1] and len(set(sessions)) == 2
    [(compiles,)] = sql(lake, "SELECT SUM(compiles) FROM runs")
    [(rows,)] = sql(lake, "SELECT COUNT(*) FROM compiles WHERE counts_as_compile")
    assert compiles == rows == _compiles(run_dir)
    by_rank = sql(
        lake,
        "SELECT rank, COUNT(DISTINCT filename) FROM read_parquet("
        f"'{lake}/v1/compiles/*/*.parquet', filename=true) GROUP BY rank ORDER BY rank",
    )
    assert [count for _, count in by_rank] == [1, 1]
    assert f"replaced {len(whole)} older file(s)" in done.stdout
    # and exported whole again: the run's files hold both ranks once more, no per-rank file left
    _export(str(run_dir), "--to", str(lake))
    writers = {base_of(f.writer) for t in TABLES for f in Lake(str(lake)).files(t)}
    assert writers == {"all"} and len(_sessions(lake)) == 2


def test_a_whole_export_of_a_partial_run_folder_replaces_only_its_sessions(
    jobs: list[Path], tmp_path: Path
) -> None:
    """Both ranks exported per rank, then a folder holding only rank 0's log exported whole (a node
    without the shared run directory): rank 1 keeps its rows, rank 0 is counted once, and the message
    counts the files actually replaced (rank 0's own)."""
    run_dir, lake = jobs[0], tmp_path / "lake"
    _export(str(run_dir), "--to", str(lake), "--per-rank")
    rank0 = sorted(run_dir.glob("rank00000-*.jsonl"))[0]
    own = [f for t in TABLES for f in Lake(str(lake)).files(t) if f.writer.startswith("rank00000-")]
    partial = tmp_path / "node0"
    partial.mkdir()
    shutil.copy(rank0, partial)
    done = _export(str(partial), "--to", str(lake))
    assert [s[1] for s in _sessions(lake)] == [0, 1]
    [(compiles,)] = sql(lake, "SELECT SUM(compiles) FROM runs")
    [(rows,)] = sql(lake, "SELECT COUNT(*) FROM compiles WHERE counts_as_compile")
    assert compiles == rows == _compiles(run_dir)
    rank1 = {base_of(f.writer) for f in Lake(str(lake)).files("compiles")}
    assert any(w.startswith("rank00001-") for w in rank1) and "all" in rank1
    assert f"replaced {len(own)} older file(s)" in done.stdout and len(own) >= 3


def _counted_once(lake: Path, run_dir: Path) -> list[str]:
    """What is wrong with the lake's rows of ``run_dir`` (empty: each session once, every compile)."""
    problems = []
    sessions = _sessions(lake)
    if [s[1] for s in sessions] != [0, 1] or len(set(sessions)) != 2:
        problems.append(f"sessions {sessions}")
    [(compiles,)] = sql(lake, "SELECT SUM(compiles) FROM runs")
    [(rows,)] = sql(lake, "SELECT COUNT(*) FROM compiles WHERE counts_as_compile")
    if not compiles == rows == _compiles(run_dir):
        problems.append(f"runs count {compiles} compiles, compiles holds {rows}")
    return problems


@pytest.mark.parametrize("arrives", ["a straggler's log", "a node's partial folder"])
def test_a_whole_export_and_another_of_its_sessions_at_the_same_moment_lose_no_session(
    jobs: list[Path], tmp_path: Path, arrives: str
) -> None:
    """A run exported whole; then, started together, the run exported whole again (a re-export) and
    one of its sessions exported another way (a straggler's log per rank, or a folder holding only
    rank 0's log exported whole): in each of 8 trials each session is in the lake once and every table
    counts the run's compiles. Before, each export could take the session from the other's file (the
    whole export from the straggler's, the straggler's from the whole file): the straggler's case lost
    rank 1 in 2 of 8 trials in one run here and none in the next, as the two processes' timing fell;
    the interleaving itself is pinned by the test after this one, which failed every time."""
    run_dir = jobs[0]
    if arrives == "a straggler's log":
        other = [str(sorted(run_dir.glob("rank00001-*.jsonl"))[0]), "--per-rank"]
    else:
        node = tmp_path / "node0"
        node.mkdir()
        shutil.copy(sorted(run_dir.glob("rank00000-*.jsonl"))[0], node)
        other = [str(node)]
    export = [sys.executable, "-m", "recompprof._cli.main", "export"]
    failed = {}
    for trial in range(8):
        lake = tmp_path / f"lake{trial}"
        _export(str(run_dir), "--to", str(lake))
        together = [
            subprocess.Popen([*export, *args, "--to", str(lake)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=job_env({}))
            for args in ([str(run_dir)], other)
        ]  # fmt: skip
        for proc in together:
            _, err = proc.communicate(timeout=JOB_TIMEOUT)
            assert proc.returncode == 0, err.decode()
        if problems := _counted_once(lake, run_dir):
            failed[trial] = problems
    assert not failed, failed


def test_an_export_whose_file_another_export_gave_up_takes_nothing_more(
    jobs: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving that left a run with no session: the run exported whole again (its files
    committed), then a straggler's log exported per rank from start to end (taking its session from
    the whole files), then the whole export settling. It finds its own files given up and takes
    nothing from the straggler's files or the rewritten whole ones: each session once (before, it
    took both sessions from every other file, and the lake held none of the run)."""
    from recompprof._history import sessions
    from recompprof._history.export import export

    run_dir, lake = jobs[0], tmp_path / "lake"
    _export(str(run_dir), "--to", str(lake))
    straggler = sorted(run_dir.glob("rank00001-*.jsonl"))[0]
    settle, nested = sessions.settle, []

    def straggler_first(*args: Any) -> list[str]:
        if not nested:
            nested.append(straggler)  # its own export settles as it would
            export([straggler], str(lake), per_rank=True)
        return settle(*args)

    monkeypatch.setattr(sessions, "settle", straggler_first)
    export([run_dir], str(lake))
    assert nested and not _counted_once(lake, run_dir)


def test_an_export_whose_sessions_another_export_took_from_every_file_exports_again(
    jobs: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export whose files another export of the same sessions gave up right after it settled (the
    two took the sessions from each other's files at once) finds them in no file and exports again:
    the lake holds each session once. Where that keeps happening, it stops after its attempts with
    one line naming the sessions, never a silent loss."""
    from recompprof._history import sessions
    from recompprof._history.export import ATTEMPTS, export
    from recompprof._history.names import LakeError

    run_dir, lake = jobs[0], tmp_path / "lake"
    settle, taken, takes = sessions.settle, [], {"left": 1}  # how many settles are taken from

    def then_taken(the_lake: Lake, run_id: str, held: Any, scope: Any, written: set[str]) -> Any:
        replaced = settle(the_lake, run_id, held, scope, written)
        if takes["left"]:
            takes["left"] -= 1
            taken.append(sorted(written))
            for path in written:
                the_lake.delete(path)
        return replaced

    monkeypatch.setattr(sessions, "settle", then_taken)
    export([run_dir], str(lake))
    assert len(taken) == 1 and not _counted_once(lake, run_dir)
    takes["left"], taken[:] = ATTEMPTS, []
    with pytest.raises(LakeError, match=r"rank 0 \(pid \d+\), rank 1 \(pid \d+\) of this export"):
        export([run_dir], str(lake / "again"))
    assert len(taken) == ATTEMPTS


def test_a_gate_on_a_run_whose_rank_has_not_arrived_says_which(
    jobs: list[Path], tmp_path: Path
) -> None:
    """``compare`` on a 2-rank run of which only rank 0's session is in the lake (rank 1's export not
    arrived yet, or its node's log lost) warns that rank 1 has none, and the JSON lists it; once rank
    1 is exported the warning is gone (before, the gate held rank 0 alone and said nothing)."""
    run_dir, lake = jobs[0], tmp_path / "lake"
    node0 = tmp_path / "node0"
    node0.mkdir()
    shutil.copy(sorted(run_dir.glob("rank00000-*.jsonl"))[0], node0)
    _export(str(node0), "--to", str(lake))
    gate = ("history", "compare", run_dir.name, "--lake", str(lake), "--format", "json")
    done = cli(*gate)
    assert done.stdout, done.stderr
    answer = json.loads(done.stdout)
    assert done.returncode == 0 and (answer["world_size"], answer["missing_ranks"]) == (2, [1])
    said = "the run's world size is 2 and rank 1 has no session in the lake"
    assert any(said in w for w in answer["warnings"]), answer["warnings"]
    assert said in cli(*gate[:-2]).stderr
    _export(str(run_dir), "--to", str(lake), "--per-rank")
    answer = json.loads(cli(*gate).stdout)
    assert answer["missing_ranks"] == [] and not any(said in w for w in answer["warnings"])


# Run ids too long for a file name as they are: two that share a long head, and non-ASCII ones
# whose every character is 6 or 12 bytes quoted.
LONG_RUN_IDS = ("r" * 250 + "-a", "r" * 250 + "-b", "é" * 60, "运行" * 40)


def test_run_ids_too_long_for_a_file_name_export_once_each_and_keep_their_ids(
    jobs: list[Path], tmp_path: Path
) -> None:
    """Runs whose ids quote past a filesystem's 255-byte names (a long ``--rdzv-id``, 60 non-ASCII
    characters): each exports, whole and then one rank's log on its own (a straggler), into files
    named within the limit, one run apart from another that shares its head; the lake keeps every
    id whole and counts each session once."""
    copies = [
        _with_run_id(jobs[0], tmp_path / f"long-{i}", run_id)
        for i, run_id in enumerate(LONG_RUN_IDS)
    ]
    lake = tmp_path / "lake"
    for copy in copies:
        _export(str(copy), "--to", str(lake))
        rank0 = sorted(copy.glob("rank00000-*.jsonl"))[0]
        _export(str(rank0), "--to", str(lake), "--per-rank")
    names = [p.name for p in lake.rglob("*.parquet")]
    assert names and max(len(n.encode()) for n in names) <= 200
    parts = {f.run_part for t in TABLES for f in Lake(str(lake)).files(t)}
    assert len(parts) == len(LONG_RUN_IDS)
    sessions = _sessions(lake)
    assert sorted({s[0] for s in sessions}) == sorted(LONG_RUN_IDS)
    assert len(sessions) == len(set(sessions)) == 2 * len(LONG_RUN_IDS)
    [(compiles,)] = sql(lake, "SELECT SUM(compiles) FROM runs")
    [(rows,)] = sql(lake, "SELECT COUNT(*) FROM compiles WHERE counts_as_compile")
    assert compiles == rows == _compiles(*copies)


@pytest.mark.workload
def test_a_run_id_longer_than_a_job_name_starts_the_session_and_reaches_the_lake(
    tmp_path: Path,
) -> None:
    """A process whose run id (``RECOMPPROF_RUN_ID``, as a launcher's) is longer than the 200
    characters a job name may hold: attach starts (it raised pydantic's ValidationError), the job
    falls back to the id's head and a digest of the whole, the event log goes to a run folder whose
    name fits (it could not be made), and the session exports to the lake under its whole run id."""
    run_id, lake = "x" * 300, tmp_path / "lake"
    job = textwrap.dedent(
        """
        import torch, recompprof
        recompprof.attach(mode="profile")
        f = torch.compile(lambda x: x + 1, backend="eager")
        f(torch.ones(2)); f(torch.ones(3))
        """
    )
    env = job_env({"RECOMPPROF_RUN_ID": run_id, "RECOMPPROF_HISTORY_URI": str(lake)})
    done = subprocess.run(
        [sys.executable, "-c", job], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0 and "recompprof" not in done.stderr, done.stderr[-2000:]
    [(found, job_name)] = sql(lake, "SELECT run_id, job FROM runs")
    assert found == run_id and job_name == shortened(run_id, MAX_SUBJECT) and len(job_name) == 200
    assert job_name.startswith("x" * 180) and job_name != shortened("x" * 301, MAX_SUBJECT)
    [log] = (tmp_path / "recompprof-runs" / run_folder(run_id)).glob("*.jsonl")
    assert json.loads(log.read_text().splitlines()[0])["run_id"] == run_id


@pytest.mark.workload
def test_a_run_id_in_bytes_that_are_not_utf8_starts_the_session_and_reaches_the_lake(
    tmp_path: Path,
) -> None:
    """A process whose ``RECOMPPROF_RUN_ID`` holds bytes that are not UTF-8 (Python hands them on as
    lone surrogates): attach starts (it raised pydantic's ValidationError into the job), the run id
    spells each such byte ``\\xff``, and the session's log and the lake hold that id."""
    lake = tmp_path / "lake"
    job = textwrap.dedent(
        """
        import torch, recompprof
        recompprof.attach(mode="profile")
        f = torch.compile(lambda x: x + 1, backend="eager")
        f(torch.ones(2)); f(torch.ones(3))
        """
    )
    raw = b"job\xff\xfe-1".decode("utf-8", "surrogateescape")  # what os.environ holds
    env = job_env({"RECOMPPROF_RUN_ID": raw, "RECOMPPROF_HISTORY_URI": str(lake)})
    done = subprocess.run(
        [sys.executable, "-c", job], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0 and "recompprof" not in done.stderr, done.stderr[-2000:]
    spelled = "job\\xff\\xfe-1"
    [log] = (tmp_path / "recompprof-runs" / run_folder(spelled)).glob("*.jsonl")
    assert json.loads(log.read_text().splitlines()[0])["run_id"] == spelled
    assert sql(lake, "SELECT run_id, compiles FROM runs") == [(spelled, 2)]


@pytest.mark.parametrize("seed", range(4))
def test_as_text_keeps_text_and_spells_every_other_byte(seed: int) -> None:
    """Over random byte strings read the way Python reads an environment or a file name: the result
    is always UTF-8 text; valid UTF-8 comes back unchanged; the same bytes give the same text, and
    the bytes that are not UTF-8 are spelled ``\\xNN``, so two such strings stay two."""
    rng = random.Random(seed)
    seen: dict[str, bytes] = {}
    for _ in range(500):
        raw = bytes(
            rng.choice(b"ab\x00\x7f\x80\xbf\xc3\xa9\xe8\xbf\x90\xff")
            for _ in range(rng.randrange(8))
        )
        value = raw.decode("utf-8", "surrogateescape")
        text = as_text(value)
        text.encode("utf-8")  # never raises
        if value == raw.decode("utf-8", "replace"):
            assert text == value
        assert text == as_text(value)
        # (no backslash is drawn: a literal "\\xff" in valid text would spell the same)
        assert seen.setdefault(text, raw) == raw, (text, raw, seen[text])
    assert as_text("job\udcff") == "job\\xff" and as_text("\ud800x") == "\\ud800x"


def test_a_run_folder_is_one_safe_name_for_each_run_id() -> None:
    """A run's default folder name (``recompprof-runs/<name>``) is one file name for any run id: no
    separator, not hidden, at most 200 bytes, the id itself where it is already such a name, and two
    ids never share one."""
    plain = ["job-9", "slurm-77", "torchrun-3f2a", "é" * 100, "a b"]
    hostile = ["a/b", "a%2Fb", "..", ".", ".hidden", "a\\b", "nul\x00x", "/etc", "%"]
    long = ["r" * 250 + "-a", "r" * 250 + "-b", "é" * 101, "运行" * 40, "/" * 100]
    names = {run_id: run_folder(run_id) for run_id in plain + hostile + long}
    for run_id, name in names.items():
        assert "/" not in name and "\x00" not in name and not name.startswith("."), run_id
        assert 0 < len(name.encode()) <= 200, run_id
    assert all(names[run_id] == run_id for run_id in plain)
    assert len(set(names.values())) == len(names)


def test_labels_given_to_an_export_are_remembered_for_the_run(
    jobs: list[Path], tmp_path: Path
) -> None:
    """A run exported with ``--labels``, then exported again without them (whole, and one rank's log on
    its own, as a straggler's export at its end): every table keeps the run's ``team`` and ``model``,
    and so do the days a compaction writes after; ``--labels ''`` forgets them."""
    run_dir, lake = jobs[0], tmp_path / "lake"
    _export(str(run_dir), "--to", str(lake), "--labels", "team=vision,model=tiny")
    _export(str(run_dir), "--to", str(lake))
    rank0 = sorted(run_dir.glob("rank00000-*.jsonl"))[0]
    _export(str(rank0), "--to", str(lake), "--per-rank")
    present = [t for t in TABLES if Lake(str(lake)).files(t)]
    assert {"runs", "compiles"} <= set(present)
    for table in present:
        rows = sql(lake, f"SELECT DISTINCT team, model FROM {table}")
        assert rows == [("vision", "tiny")], table
    [(labels,)] = sql(lake, "SELECT DISTINCT labels FROM runs")
    assert dict(labels) == {"team": "vision", "model": "tiny"}
    # The run was recorded today: the CLI compacts ended days only (tests/test_history_compact.py),
    # so today is compacted through the command's own function.
    compact.compact(Lake(str(lake)), datetime.datetime.now(datetime.timezone.utc).date())
    compacted = list((lake / "v1-daily").rglob("part-0.parquet"))
    assert compacted
    for part in compacted:
        table = pq.read_table(part, columns=["team", "model"])
        assert set(zip(*(table[c].to_pylist() for c in ("team", "model")))) <= {("vision", "tiny")}
    # --labels '' forgets them: exported again without labels, the run has none, and keeps none
    _export(str(run_dir), "--to", str(lake), "--labels", "")
    _export(str(run_dir), "--to", str(lake))
    assert sql(lake, "SELECT DISTINCT team, model FROM runs") == [(None, None)]


def test_torchelastic_none_or_empty_is_no_run_id() -> None:
    """Under torchrun, ``TORCHELASTIC_RUN_ID`` ``none`` (any case) or empty gives the node's
    ``torchrun-<hash>`` id, the same for every rank of the node; a real run id is kept, and
    ``RECOMPPROF_RUN_ID`` still wins."""
    from recompprof._capture.identity import detect

    base = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    found = {
        value: detect({**base, "TORCHELASTIC_RUN_ID": value}).run_id
        for value in ("none", "NONE", "", " none ")
    }
    assert len(set(found.values())) == 1 and next(iter(found.values())).startswith("torchrun-")
    other_rank = detect({**base, "RANK": "1", "TORCHELASTIC_RUN_ID": "none"}).run_id
    assert other_rank == found["none"]
    assert detect({**base, "TORCHELASTIC_RUN_ID": "job-9"}).run_id == "job-9"
    assert detect({**base, "TORCHELASTIC_RUN_ID": "none", "RECOMPPROF_RUN_ID": "x"}).run_id == "x"
    assert (
        detect({**base, "TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "77"}).run_id == "slurm-77"
    )
