"""``recompprof watch``: a live view of what each rank of a running job compiles, read from the run directory a
real job writes (a subprocess), in a terminal (tmux), piped, and once."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from needs import starts
from report_counts import report_counts

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = Path(__file__).resolve().parent / "workloads"
PYTHONPATH = os.pathsep.join([str(REPO), str(REPO / "exporters")])
WATCH = [sys.executable, "-m", "recompprof._cli.main", "watch"]
COMPILING = re.compile(
    r"rank 0 compiling `Model\.forward` \(recompile: size of `L\['x'\]` dim 0 changed\), (\d+) s"
)
TMUX = shutil.which("tmux")


def _env(run: Path, rank: int = 0, world: int = 1) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": PYTHONPATH,
        "RECOMPPROF_RUN_DIR": str(run),
        "RECOMPPROF_RUN_ID": "watched",
    }
    env.pop("RECOMPPROF_STATUS_LINE", None)
    if world > 1:
        env.update(
            RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world)
        )
    return env


def _slow_job(run: Path, seconds: float) -> subprocess.Popen[str]:
    """The real job: attaches, compiles ``Model.forward``, then recompiles it for ``seconds``."""
    return subprocess.Popen(
        [sys.executable, str(WORKLOADS / "slow_compile.py"), str(seconds)],
        env=_env(run),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _piped(run: Path | str, *options: str) -> subprocess.Popen[str]:
    """``recompprof watch RUN OPTIONS`` with its output to pipes (not a terminal)."""
    return subprocess.Popen(
        [*WATCH, str(run), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )


def _wait(what: Callable[[], Any], timeout: float, step: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s")


@pytest.fixture(scope="module")
@starts("workload")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real two-rank run, both ranks ended: rank 1 recompiles more than rank 0 and hits the recompile limit."""
    run = tmp_path_factory.mktemp("finished") / "run"
    jobs = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKLOADS / "train_until_told.py"),
                "--steps",
                "8",
                "--backend",
                "eager",
                "--recompile-steps",
                str(3 + 3 * rank),
                "--recompile-limit",
                "4",
            ],
            env=_env(run, rank, 2),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    for job in jobs:
        out, _ = job.communicate(timeout=240)
        assert job.returncode == 0, out
    return run


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Runs a command in a detached tmux session of 160 columns, 40 rows unless told (its own server); yields a
    function that starts it and returns the pane's capture function."""
    if TMUX is None:
        pytest.fail("tmux is needed for the terminal tests (apt-get install tmux)")
    socket = tmp_path / "tmux.sock"

    def start(command: list[str], rows: int = 40) -> Callable[[], str]:
        quoted = " ".join(_quote(part) for part in command)
        env = f"env PYTHONPATH={_quote(PYTHONPATH)} TERM=xterm-256color"
        subprocess.run(
            [
                TMUX,
                "-S",
                str(socket),
                "new-session",
                "-d",
                "-s",
                "w",
                "-x",
                "160",
                "-y",
                str(rows),
                f"{env} {quoted}; echo EXIT $?; sleep 120",
            ],
            check=True,
        )
        return lambda: (
            subprocess.run(
                [TMUX, "-S", str(socket), "capture-pane", "-p", "-t", "w"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )

    yield start
    subprocess.run([TMUX, "-S", str(socket), "kill-server"], capture_output=True)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@pytest.mark.workload
def test_in_a_terminal_the_view_is_redrawn_in_place_while_the_job_compiles(
    tmux: Any, tmp_path: Path
) -> None:
    """On a terminal (tmux), watch started before the run directory exists says it waits; while the real job's
    recompile runs, one screen shows rank 0 compiling `Model.forward` with its trigger and a growing age;
    after the job ends the same screen shows the rank ended and watch exits 0 by itself."""
    run = tmp_path / "run"
    screen = tmux([*WATCH, str(run), "--interval", "0.3"])
    assert "waiting for" in _wait(lambda: (s := screen()) and "waiting for" in s and s, 60)
    job = _slow_job(run, 4)
    ages: list[int] = []
    shots: list[str] = []
    try:
        while job.poll() is None:
            shot = screen()
            found = COMPILING.search(shot)
            if found:
                ages.append(int(found.group(1)))
                shots.append(shot)
            time.sleep(0.25)
        assert job.returncode == 0
        final = _wait(lambda: (s := screen()) and "EXIT" in s and s, 60)
    finally:
        if job.poll() is None:
            job.kill()
    assert len(set(ages)) >= 2 and ages == sorted(ages), ages
    middle = shots[-1]
    assert (
        middle.count("recompprof watch ") == 1
    )  # redrawn in place: one screen, not a scroll of them
    assert re.search(r"^\s+0\s+\d+\s+1\s+0\s+0\s+0\s+\d+ s ago\s+rank 0 compiling", middle, re.M), (
        middle
    )
    assert "compiling now: rank 0" in middle
    assert final.count("recompprof watch ") == 1
    # One recompile of a job that advanced no step: steady state only once a cause repeats, so 0.
    assert re.search(
        r"^\s+0\s+\d+\s+2\s+1\s+0\s+0\s+\d+ s ago\s+ended \d\d:\d\d:\d\d UTC", final, re.M
    ), final
    assert "all 1 rank(s) ended" in final and "EXIT 0" in final
    assert "steady-state recompiles by cause:" not in final  # none is steady state: nothing to list


def test_ctrl_c_leaves_with_exit_0_and_the_cursor_back(tmux: Any, tmp_path: Path) -> None:
    """Ctrl-C on a terminal ends watch with exit status 0 and no traceback, the last screen kept and the cursor shown."""
    run = tmp_path / "run"
    run.mkdir()
    screen = tmux([*WATCH, str(run), "--interval", "0.3"])
    _wait(lambda: "waiting for event logs" in screen(), 60)
    socket = tmp_path / "tmux.sock"
    subprocess.run([str(TMUX), "-S", str(socket), "send-keys", "-t", "w", "C-c"], check=True)
    final = _wait(lambda: (s := screen()) and "EXIT" in s and s, 30)
    assert "EXIT 0" in final and "Traceback" not in final and "waiting for event logs" in final
    cursor = subprocess.run(
        [str(TMUX), "-S", str(socket), "display", "-p", "-t", "w", "#{cursor_flag}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert cursor == "1"


@pytest.mark.workload
def test_piped_it_prints_plain_blocks_when_something_changes(tmp_path: Path) -> None:
    """Piped, watch writes no escape sequence, a plain block each time something changed (not each refresh):
    one naming the running recompile on one line, then one saying the rank ended; then it exits 0."""
    run = tmp_path / "run"
    watch = _piped(run, "--interval", "0.2")
    job = _slow_job(run, 3)
    try:
        out, err = watch.communicate(timeout=120)
        job.wait(60)
    finally:
        for proc in (watch, job):
            if proc.poll() is None:
                proc.kill()
    assert watch.returncode == 0 and job.returncode == 0, err
    assert "\x1b" not in out and "\r" not in out and err == ""
    blocks = out.split("\n\n" + "recompprof watch ")
    assert 3 <= len(blocks) <= 8, (
        out
    )  # waiting, first compile, recompile, ended: not one per 0.2 s refresh
    compiling = [line for line in out.splitlines() if COMPILING.search(line)]
    assert compiling and compiling[0].split()[:5] == ["0", "0", "1", "0", "0"], out
    ended = re.search(r"^\s+0 .* ended \d\d:\d\d:\d\d UTC$", out, re.M)
    assert ended and out.index(compiling[0]) < ended.start() < out.index("all 1 rank(s) ended"), out


@pytest.mark.workload
def test_a_job_ended_during_a_compile_is_shown_ended_while_compiling(tmp_path: Path) -> None:
    """Piped: a job that gets SIGTERM during its slow recompile writes a session_end naming that compile, and watch
    shows the rank ended while compiling it (frame, trigger, how long it had run), then stops."""
    run = tmp_path / "run"
    watch = _piped(run, "--interval", "0.2")
    job = _slow_job(run, 300)
    try:
        assert watch.stdout is not None
        seen = _lines_until(watch.stdout, COMPILING.pattern, 120)
        time.sleep(1.5)
        job.terminate()
        job.wait(60)
        rest, err = _rest(watch, 60)
    finally:
        for proc in (watch, job):
            if proc.poll() is None:
                proc.kill()
    assert watch.returncode == 0 and err == "", err
    found = re.search(
        r"^\s+0\s+\d+\s+1\s+0\s+0\s+0\s+\d+ s ago\s+ended \d\d:\d\d:\d\d UTC while compiling `Model\.forward` "
        r"\(recompile: size of `L\['x'\]` dim 0 changed\), (\d+) s$",
        rest,
        re.M,
    )
    assert found and int(found.group(1)) >= 1, seen + rest
    assert "all 1 rank(s) ended" in rest


def _watch_rows(out: str) -> dict[int, list[str]]:
    return {
        int(line.split()[0]): line.split()
        for line in out.splitlines()
        if re.match(r"^\s+\d+\s+\d+\s+\d+\s", line)
    }


def test_once_on_a_finished_run_gives_the_counts_report_gives(finished_run: Path) -> None:
    """``--once`` prints each rank's compiles, recompiles and limit hits as ``recompprof report --rank`` counts them,
    and its steady-state recompiles as the report's fold does, then exits 0."""
    from recompprof._analysis.report.fold import build_report
    from recompprof._eventlog.reader import read_run

    done = subprocess.run(
        [*WATCH, str(finished_run), "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    rows = _watch_rows(done.stdout)
    assert sorted(rows) == [0, 1]
    for rank, row in rows.items():
        compiles, recompiles, limit_hits = report_counts(finished_run, "--rank", str(rank))
        report = build_report(e for e in read_run(finished_run) if e.rank == rank)
        steady = sum(f.steady_state_recompiles for f in report.frames.values())
        assert [int(n) for n in row[2:6]] == [compiles, recompiles, steady, limit_hits], done.stdout
        assert "ended" in row
    assert (
        report_counts(finished_run, "--rank", "1")[1]
        > report_counts(finished_run, "--rank", "0")[1]
        > 0
    )  # the ranks differ
    assert report_counts(finished_run, "--rank", "1")[2] > 0


def _rest(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """All ``proc`` prints from here to its exit, and its stderr (``communicate`` would lose what ``readline``
    has buffered); killed after ``timeout`` seconds."""
    assert proc.stdout is not None and proc.stderr is not None
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        rest, err = proc.stdout.read(), proc.stderr.read()
        proc.wait()
    finally:
        timer.cancel()
    return rest, err


def _lines_until(stream: Any, pattern: str, timeout: float) -> str:
    """What ``stream`` printed up to and including the first line matching ``pattern``."""
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen += line
        if re.search(pattern, line):
            return seen
    raise AssertionError(f"no line matching {pattern!r} in:\n{seen}")


def test_a_log_appearing_later_is_followed_and_a_torn_line_waits_for_its_end(
    finished_run: Path, tmp_path: Path
) -> None:
    """A rank whose log appears after watch started is picked up; its last line, written in two parts, is read
    only once whole (never counted as corrupt), and watch stops only when both announced ranks have ended."""
    run = tmp_path / "run"
    run.mkdir()
    [log0] = finished_run.glob("rank00000-*.jsonl")
    [log1] = finished_run.glob("rank00001-*.jsonl")
    shutil.copy(log0, run / log0.name)
    watch = _piped(run, "--interval", "0.2")
    try:
        assert watch.stdout is not None
        first = _lines_until(watch.stdout, r"^total: ", 60)
        assert (
            "ranks 1 of 2" in first and "ended 1 of 1" in first
        )  # rank 1 is announced but has no log yet
        data = log1.read_bytes()
        last = data.rstrip(b"\n").rfind(b"\n") + 1  # where the session_end line starts
        cut = last + (len(data) - last) // 2
        with open(run / log1.name, "wb") as out:
            out.write(data[:cut])
            out.flush()
            second = _lines_until(watch.stdout, r"^total: ", 30)
            assert "ranks 2 " in second and "ended 1 of 2" in second, second
            time.sleep(1.0)  # several refreshes with the line still torn
            assert watch.poll() is None
            out.write(data[cut:])
        rest, err = _rest(watch, 60)
    finally:
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0, err
    assert (
        "skipped" not in first + second + rest
        and "corrupt" not in first + second + rest
        and err == ""
    )
    assert "ended 2 of 2" in rest and "all 2 rank(s) ended" in rest
    rows = _watch_rows(rest)
    assert (
        rows[1][2:6]
        == _watch_rows(
            subprocess.run(
                [*WATCH, str(finished_run), "--once"],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": PYTHONPATH},
            ).stdout
        )[1][2:6]
    )


def _watch(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, *WATCH, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )


# Root reads any directory: as root, watch runs without the capabilities that let it (it stays root, so
# the interpreter under /root is still its own to run).
_NO_OVERRIDE = "-dac_override,-dac_read_search"
WITHOUT_ROOT_READS = (
    ("setpriv", f"--inh-caps={_NO_OVERRIDE}", f"--bounding-set={_NO_OVERRIDE}")
    if os.geteuid() == 0
    else ()
)


def test_a_file_as_run_dir_is_one_error_line_and_exit_2(finished_run: Path) -> None:
    """A file given as RUN_DIR (an event log itself) is refused with one ``recompprof: error:`` line, exit 2."""
    [log] = finished_run.glob("rank00000-*.jsonl")
    done = _watch(str(log))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"recompprof: error: {log}: a file, not a run directory; watch follows the "
        "directory a job writes its event logs into (recompprof report reads a single log)"
    ]


def test_an_unreadable_run_dir_is_one_error_line_and_exit_2(
    finished_run: Path, tmp_path: Path
) -> None:
    """A run directory watch may not read is refused with one error line naming it, exit 2 (when the tests run
    as root, watch runs without root's right to read any directory)."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    run.chmod(0)
    try:
        done = _watch(str(run), prefix=WITHOUT_ROOT_READS)
    finally:
        run.chmod(0o755)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"recompprof: error: {run}: directory is not readable"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--once"], "no such directory"),
        (["--once", "EMPTY"], "no recompprof event logs (rank*.jsonl) found"),
        (["--interval", "0"], "--interval must be a number of seconds from 0.1 to 86400 (got 0.0)"),
    ],
)
def test_once_with_nothing_to_show_and_bad_options_exit_2(
    args: list[str], message: str, tmp_path: Path
) -> None:
    """``--once`` on a directory that does not exist or holds no log, and a non-positive ``--interval``,
    are one error line and exit 2 (without ``--once`` a missing or empty directory is waited for)."""
    target = tmp_path / "run"
    if "EMPTY" in args:
        target.mkdir()
        args = [a for a in args if a != "EMPTY"]
    done = _watch(str(target), *args)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("recompprof: error: ") and message in line


@pytest.mark.parametrize("interval", ["inf", "-inf", "nan", "1e-20", "1e30"])
def test_an_interval_out_of_range_is_one_error_line_naming_it(
    interval: str, tmp_path: Path
) -> None:
    """``--interval`` infinite, not a number, too small or too large (inf used to end in "unexpected OverflowError
    ... a recompprof bug") exits 2 with one line naming ``--interval`` and what it allows, and no traceback."""
    done = _watch(f"--interval={interval}", str(tmp_path))
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.splitlines() == [
        f"recompprof: error: --interval must be a number of seconds from 0.1 to 86400 (got {float(interval)})"
    ]


def _line(event: Any) -> bytes:
    return event.model_dump_json().encode() + b"\n"


def test_the_tail_reads_whole_lines_only_and_starts_a_replaced_log_again(tmp_path: Path) -> None:
    """The run directory's tail yields each line once it is whole, never a part of one; counts a line longer than
    the reader's limit as corrupt without holding it; reads a log deleted and written again from its start; and
    at the end reads a last line without newline as the reader does (an event, else a torn last line)."""
    from recompprof._eventlog.lines import MAX_LINE
    from recompprof._eventlog.tail import RunTail
    from recompprof._model.events import Compile, Frame, SessionStart

    start = SessionStart(time=1.0, run_id="r", host="h", pid=1, versions={}, mode="monitor")
    compiles = [
        _line(
            Compile(
                time=2.0 + i,
                frame=Frame(name="f", file="/x/f.py", line=3),
                compile_id=f"0/{i}",
                is_recompile=i > 0,
            )
        )
        for i in range(4)
    ]
    log = tmp_path / "rank00000-1.jsonl"
    tail = RunTail(tmp_path)
    log.write_bytes(_line(start) + compiles[0][:10])
    assert [e.kind for _, e in tail.poll()] == ["session_start"]
    with log.open("ab") as out:
        out.write(compiles[0][10:-1])
        out.flush()
        assert list(tail.poll()) == []  # all but its newline
        out.write(b"\n" + b"x" * (MAX_LINE // 2))
        out.flush()
        assert [e.compile_id for _, e in tail.poll()] == ["0/0"]  # type: ignore[union-attr]
        out.write(b"x" * (MAX_LINE // 2) + b"\n" + compiles[1])
    assert [e.compile_id for _, e in tail.poll()] == ["0/1"]  # type: ignore[union-attr]
    assert (tail.stats.corrupt, tail.stats.torn_tail) == (1, 0)
    log.unlink()
    log.write_bytes(compiles[2] + compiles[3][:-1])
    (tmp_path / "rank00001-2.jsonl").write_bytes(b'{"kind": "comp')
    assert [e.compile_id for _, e in tail.poll()] == ["0/2"]  # type: ignore[union-attr]
    assert [e.compile_id for _, e in tail.finish()] == ["0/3"]  # type: ignore[union-attr]
    assert (tail.stats.files, tail.stats.corrupt, tail.stats.torn_tail) == (2, 1, 1)


def test_sigterm_ends_watch_like_ctrl_c(tmp_path: Path) -> None:
    """SIGTERM ends a watch that is waiting for its run directory with exit status 0 and nothing on stderr."""
    watch = _piped(tmp_path / "run", "--interval", "0.2")
    try:
        assert watch.stdout is not None
        _lines_until(watch.stdout, "waiting for ", 60)
        watch.terminate()
        rest, err = _rest(watch, 30)
    finally:
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0 and err == "", err


def test_a_terminal_too_short_for_every_rank_keeps_the_compiling_ones(
    tmux: Any, tmp_path: Path
) -> None:
    """On a terminal with fewer rows than ranks, the ranks compiling are shown even when their numbers come
    last, the others fill the rest in rank order, and the ranks left out are counted above the table."""
    from recompprof._eventlog.writer import write_events
    from recompprof._model.events import Compile, CompileStart, Frame, Reason, SessionStart

    run = tmp_path / "run"
    run.mkdir()
    now = time.time()
    frame = Frame(name="Block.forward", file="/m/block.py", line=10)
    for rank in range(30):
        events: list[Any] = [
            SessionStart(
                time=now - 100,
                rank=rank,
                run_id="big",
                host="h",
                pid=100 + rank,
                versions={},
                mode="monitor",
                world_size=30,
            ),
            Compile(
                time=now - 90, rank=rank, step=0, frame=frame, compile_id="0/0", is_recompile=False
            ),
        ]
        if rank in (25, 28):
            events.append(
                CompileStart(
                    time=now - 30,
                    rank=rank,
                    step=50,
                    frame=frame,
                    compile_id="0/1",
                    is_recompile=True,
                    reason=Reason(
                        text="tensor 'x' size mismatch at index 0. expected 4, actual 6",
                        category="size",
                        subject="L['x']",
                        explains_change=True,
                    ),
                )
            )
        write_events(run / f"rank{rank:05d}-{100 + rank}.jsonl", events)
    screen = tmux([*WATCH, str(run), "--interval", "0.5"], rows=20)
    shot = _wait(lambda: (s := screen()) and "compiling now" in s and s, 60)
    shown = sorted(
        int(row[0])
        for row in (line.split() for line in shot.splitlines())
        if len(row) > 8 and row[0].isdigit() and row[7:9] in (["s", "ago"], ["min", "ago"])
    )
    assert 25 in shown and 28 in shown and len(shown) < 30, shot
    assert shown[:-2] == list(range(len(shown) - 2)), shot
    assert f"({30 - len(shown)} more rank(s) not shown, 0 of them compiling)" in shot
    assert "compiling now: ranks 25, 28 | ended 0 of 30" in shot


def test_follow_keeps_watching_after_every_rank_ended(finished_run: Path, tmp_path: Path) -> None:
    """With ``--follow``, a run whose ranks have all ended is still watched: a log written later (a restarted
    rank) is read into its rank, and watch ends only when told."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    watch = _piped(run, "--interval", "0.2", "--follow")
    try:
        assert watch.stdout is not None
        first = _lines_until(watch.stdout, r"^\s+1\s+\d+\s", 60)  # to rank 1's row
        time.sleep(1.0)
        assert watch.poll() is None
        [log1] = run.glob("rank00001-*.jsonl")
        # Written whole, then renamed into the run: the frame that first counts 3 logs then holds all of it
        # (a copy made in place can be seen empty, and the frame would show rank 1's old counts).
        shutil.copy(log1, tmp_path / "restarted.jsonl")
        os.replace(tmp_path / "restarted.jsonl", run / "rank00001-999999.jsonl")
        later = _lines_until(watch.stdout, r"\| logs 3 \|", 30)
        later += _lines_until(watch.stdout, r"^\s+1\s+\d+\s", 30)
        watch.terminate()
        rest, err = _rest(watch, 30)
    finally:
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0 and err == "", err
    assert "ended 2 of 2" in first and "rank(s) ended" not in first + later + rest
    before, after = _watch_rows(first), _watch_rows(later)
    assert [int(n) for n in after[1][2:6]] == [
        2 * int(n) for n in before[1][2:6]
    ]  # rank 1 counts both of its logs
    assert after[0][2:6] == before[0][2:6]


@pytest.mark.workload
def test_a_compiling_rank_that_falls_silent_is_said_to_be_maybe_gone(tmp_path: Path) -> None:
    """A long compile writes a ``compile_running`` every 10 s: a rank shown compiling whose log has said nothing
    for 30 s (here: killed outright mid-compile) is flagged "its process may be gone"; one heard from lately is not."""
    from recompprof._analysis.render.watch import SILENT_SECONDS, render
    from recompprof._analysis.watching import Watch
    from recompprof._eventlog.tail import RunTail

    run = tmp_path / "run"
    job = _slow_job(run, 300)
    try:
        _wait(
            lambda: (
                any(
                    '"compile_start"' in line and '"0/1"' in line
                    for log in run.glob("rank*.jsonl")
                    for line in log.read_text().splitlines()
                )
                or None
            ),
            120,
        )
    finally:
        job.kill()
        job.wait()
    tail, watch = RunTail(run), Watch()
    for log, event in tail.poll():
        watch.add(log, event)
    last = watch.ranks[0].last_time
    heard = render(watch, tail, last + SILENT_SECONDS - 5, 400)
    assert re.search(
        r"rank 0 compiling `Model\.forward` \(recompile: [^)]*\), \d+ s\s*$", heard, re.M
    ), heard
    assert "may be gone" not in heard
    silent = render(watch, tail, last + SILENT_SECONDS + 1, 400)
    assert re.search(
        r"rank 0 compiling `Model\.forward` .*; nothing from it for 31 s .*its process may be gone",
        silent,
    ), silent
