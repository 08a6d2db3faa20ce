"""Settings are checked before anything runs, and conditions met while running print one line, not a traceback.

``recompprof run`` refuses, before starting the program, every value ``attach()`` would refuse in each
rank (the exporters' own checks included); a bad address or TLS file fails with a ``ConfigError`` naming
the setting (and the path) instead of an internal error; a taken port or an unusable run directory is one
warning line on stderr, with the traceback kept for debug logging.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from recorded_runs import clean_env, cli
from servers import free_port

import recompprof
from recompprof._capture.settings import ConfigError

# An address of TEST-NET-1 (RFC 5737): never assigned to a host, so nothing can listen on it.
NOT_HERE = "192.0.2.1"


@pytest.mark.workload
@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--prometheus-basic-auth", "nocolon"], ["'prometheus_basic_auth'", "user:password"]),
        (
            ["--prometheus-addr", "no-such-host.invalid"],
            ["'prometheus_addr'", "cannot resolve 'no-such-host.invalid'"],
        ),
        (["--prometheus-addr", NOT_HERE], ["'prometheus_addr'", f"cannot listen on '{NOT_HERE}'"]),
        (
            [
                "--prometheus-certfile",
                "missing-cert.pem",
                "--prometheus-keyfile",
                "missing-key.pem",
            ],
            ["'prometheus_certfile'", "missing-cert.pem", "No such file"],
        ),
    ],
    ids=["basic-auth", "unresolvable-addr", "foreign-addr", "missing-cert"],
)
def test_run_refuses_a_bad_setting_before_the_program_starts(
    tmp_path: Path, options: list[str], named: list[str]
) -> None:
    """`recompprof run --exporters prometheus` with a value attach() would refuse exits 2 with one error line
    naming the setting (and the path), never starts the program, and never repeats a password."""
    done = cli(
        "run",
        "--exporters",
        "prometheus",
        *options,
        "--",
        sys.executable,
        "-c",
        "open('started', 'w')",
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("recompprof: error: "), (
        done.stderr
    )
    for text in named:
        assert text in done.stderr, done.stderr
    assert "nocolon" not in done.stderr
    assert not (tmp_path / "started").exists() and not (tmp_path / "recompprof-runs").exists()


def test_malformed_basic_auth_fails_at_attach_without_the_prometheus_exporter() -> None:
    """A prometheus_basic_auth without a colon is a ConfigError naming the setting (not echoing the value)
    even when Prometheus is not among the exporters: a malformed value is wrong wherever it is set."""
    with pytest.raises(ConfigError, match="prometheus_basic_auth") as err:
        recompprof.attach(prometheus_basic_auth="nocolon")
    assert "nocolon" not in str(err.value)
    assert recompprof._capture.session.current() is None


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"prometheus_addr": "no-such-host.invalid"}, "prometheus_addr"),
        ({"prometheus_addr": NOT_HERE}, "prometheus_addr"),
        (
            {
                "prometheus_certfile": "/nonexistent/cert.pem",
                "prometheus_keyfile": "/nonexistent/key.pem",
            },
            "/nonexistent/cert.pem",
        ),
    ],
    ids=["unresolvable-addr", "foreign-addr", "missing-cert"],
)
def test_attach_names_the_setting_of_an_address_or_tls_file_it_cannot_use(
    settings: dict[str, str], named: str
) -> None:
    """attach() with an address that does not resolve or is not this host's, or a TLS file that is missing,
    raises a ConfigError naming the setting (and the path), and nothing stays attached."""
    with pytest.raises(ConfigError) as err:
        recompprof.attach(exporters=["prometheus"], prometheus_port=free_port(), **settings)  # type: ignore[arg-type]
    assert named in str(err.value) and "RECOMPPROF_PROMETHEUS_" in str(err.value)
    assert recompprof._capture.session.current() is None


def test_certificate_and_key_that_do_not_match_name_both_settings(tmp_path: Path) -> None:
    """Two readable files that are not a certificate and its key fail at attach naming both settings and paths."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("not a certificate\n")
    key.write_text("not a key\n")
    with pytest.raises(ConfigError) as err:
        recompprof.attach(
            exporters=["prometheus"],
            prometheus_port=free_port(),
            prometheus_certfile=cert,
            prometheus_keyfile=key,
        )
    message = str(err.value)
    assert "'prometheus_certfile'" in message and "'prometheus_keyfile'" in message
    assert str(cert) in message and str(key) in message


_JOB = textwrap.dedent("""
    import logging, sys

    import torch

    import recompprof

    port, run_dir, debug = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "debug"
    if debug:
        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(message)s")
    session = recompprof.attach(exporters=["prometheus"], prometheus_port=port, run_dir=run_dir)
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
    session.detach()
    print("trained", flush=True)
""")


@pytest.mark.workload
@pytest.mark.parametrize("debug", [False, True], ids=["default", "debug-logging"])
def test_a_taken_port_and_an_unusable_run_dir_print_one_line_each(
    tmp_path: Path, debug: bool
) -> None:
    """A job whose metrics port is taken and whose run directory cannot be created trains on; each condition
    is one warning line on stderr (naming the port, or the run directory and its setting) and no traceback,
    unless debug logging is on, where the tracebacks are logged at DEBUG."""
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    (tmp_path / "a-file").write_text("")
    run_dir = tmp_path / "a-file" / "run"  # below a regular file: cannot be created, even as root
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        done = subprocess.run(
            [sys.executable, str(script), str(port), str(run_dir), "debug" if debug else "quiet"],
            capture_output=True,
            text=True,
            env=clean_env(),
            cwd=tmp_path,
            timeout=300,
        )
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if "internal error in" in line]
    assert len(warnings) == 2, done.stderr
    (port_line,) = [line for line in warnings if "prometheus.server" in line]
    (log_line,) = [line for line in warnings if "eventlog" in line]
    assert f"port {port}" in port_line and "prometheus_port" in port_line
    assert (
        str(run_dir) in log_line
        and "RECOMPPROF_RUN_DIR" in log_line
        and "Not a directory" in log_line
    )
    if debug:
        assert done.stderr.count("Traceback (most recent call last)") == 2, done.stderr
        assert "DEBUG recompprof: traceback of the error in prometheus.server" in done.stderr
    else:
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 2, done.stderr


@pytest.mark.parametrize("source", ["argument", "environment"])
def test_a_status_period_below_its_minimum_fails_at_attach_naming_it(
    monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """``compile_status_every=1e-20`` (which made the status thread spin forever) is one ConfigError line at attach
    naming the setting, its source and its minimum, and nothing is left attached."""
    if source == "environment":
        monkeypatch.setenv("RECOMPPROF_COMPILE_STATUS_EVERY", "1e-20")
    with pytest.raises(ConfigError) as error:
        recompprof.attach(**({"compile_status_every": 1e-20} if source == "argument" else {}))
    [line] = str(error.value).splitlines()
    assert line.startswith("recompprof setting 'compile_status_every' (")
    assert ("RECOMPPROF_COMPILE_STATUS_EVERY" in line) == (source == "environment")
    assert "float >= 1" in line and "1e-20" in line, line
    assert recompprof._capture.session.current() is None


def test_a_push_period_below_its_minimum_fails_at_attach_naming_it() -> None:
    """``prometheus_push_interval=1e-20`` (a flush thread writing without pause beside training) is one ConfigError
    line at attach naming the setting and its minimum, and nothing is left attached."""
    with pytest.raises(ConfigError) as error:
        recompprof.attach(
            exporters=["prometheus"], prometheus_mode="textfile", prometheus_push_interval=1e-20
        )
    [line] = str(error.value).splitlines()
    assert line.startswith("recompprof setting 'prometheus_push_interval' (")
    assert "float >= 0.1" in line and "1e-20" in line, line
    assert recompprof._capture.session.current() is None


def test_a_history_uri_without_the_event_log_warns_that_nothing_reaches_the_lake(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``history_uri`` with ``event_log=false`` (a fleet-wide lake, one job that turned its log off):
    the session's exports read the event log, so none is made; attach says so in one warning naming
    both settings rather than leaving the lake silently without the job. With the log on, no warning."""
    lake = tmp_path / "lake"
    with caplog.at_level("WARNING"):
        recompprof.attach(run_dir=tmp_path / "off", history_uri=str(lake), event_log=False).detach()
    warned = [r.getMessage() for r in caplog.records if "history_uri" in r.getMessage()]
    assert len(warned) == 1 and "event_log is off" in warned[0], caplog.text
    assert not lake.exists()
    caplog.clear()
    with caplog.at_level("WARNING"):
        recompprof.attach(run_dir=tmp_path / "on", history_uri=str(lake)).detach()
    assert "event_log is off" not in caplog.text and (lake / "v1" / "runs").is_dir()


def test_an_identity_naming_another_process_fails_at_attach_naming_it() -> None:
    """``attach(identity=...)`` whose pid is not this process's (a launcher's pid, an identity built
    in the parent): one ConfigError line naming ``identity`` and both pids, nothing attached. (The
    session took itself for a fork of that process and recorded nothing, without a word.)"""
    import dataclasses
    import os

    from recompprof._capture.identity import detect

    other = dataclasses.replace(detect(), pid=os.getpid() + 1)
    with pytest.raises(ConfigError) as error:
        recompprof.attach(identity=other)
    [line] = str(error.value).splitlines()
    assert "identity" in line and str(os.getpid() + 1) in line and str(os.getpid()) in line
    assert recompprof._capture.session.current() is None
    with recompprof.attach(identity=detect()) as session:  # its own pid: attached
        assert recompprof._capture.session.current() is session


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        (
            "RECOMPPROF_LABELS",
            b"team=a\xff",
            "label 'team': not UTF-8 text (\\xff at character 1)",
        ),
        ("RECOMPPROF_HISTORY_URI", b"/tmp/lake\xfe", "not UTF-8 text (\\xfe at character 9)"),
        ("RECOMPPROF_JOB", b"job\xff", "valid string"),
    ],
)
def test_a_text_setting_in_bytes_that_are_not_utf8_fails_at_attach_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: bytes, named: str
) -> None:
    """A label, lake or job name whose environment bytes are not UTF-8 (Python holds them as lone
    surrogates) is one ConfigError line at attach naming the setting and the byte, nothing attached.
    (A label's value made every event log line unwritable: the log was lost, with a message about its
    directory; a lake's path failed the export as "a recompprof bug".)"""
    monkeypatch.setenv(variable, value.decode("utf-8", "surrogateescape"))
    with pytest.raises(ConfigError) as error:
        recompprof.attach()
    [line] = str(error.value).splitlines()
    setting = variable.removeprefix("RECOMPPROF_").lower()
    assert line.startswith(f"recompprof setting '{setting}' (environment variable {variable})"), (
        line
    )
    assert named in line, line
    assert recompprof._capture.session.current() is None


def test_export_labels_in_bytes_that_are_not_utf8_are_one_line(tmp_path: Path) -> None:
    """``export --labels`` with a value that is not UTF-8 (an argument in another encoding): exit 2 and
    one line naming ``--labels``, the label and the byte; no lake is made."""
    run = tmp_path / "run"
    recompprof.attach(run_dir=run).detach()
    odd = b"team=\xff".decode("utf-8", "surrogateescape")
    done = cli("export", str(run), "--to", str(tmp_path / "lake"), "--labels", odd)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "recompprof: error: --labels: label 'team': not UTF-8 text (\\xff at character 0)"
    )
    assert not (tmp_path / "lake").exists()


def test_an_empty_run_dir_or_job_from_a_deploy_template_means_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``RECOMPPROF_RUN_DIR=""`` and ``RECOMPPROF_JOB=" "`` (a template's empty value) mean the
    defaults, as an empty ``history_uri`` does: the log goes to ``recompprof-runs/<run id>`` and the
    job is the run id. (An empty run_dir wrote the log into the working directory; an empty job failed
    attach with a ConfigError.)"""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECOMPPROF_RUN_DIR", "")
    monkeypatch.setenv("RECOMPPROF_JOB", " ")
    monkeypatch.setenv("RECOMPPROF_RUN_ID", "templated")
    with recompprof.attach() as session:
        pass
    assert session.event_log_path is not None
    assert session.event_log_path.parent == tmp_path / "recompprof-runs" / "templated"
    assert not list(tmp_path.glob("*.jsonl"))
    start = session.event_log_path.read_text().splitlines()[0]
    assert '"job":"templated"' in start, start


def test_a_label_given_twice_fails_at_attach_naming_it() -> None:
    """``labels="team=a,team=b"``: which was meant cannot be known; one ConfigError line naming the
    label, nothing attached (the last one silently won)."""
    with pytest.raises(ConfigError) as error:
        recompprof.attach(labels="team=a,team=b")
    [line] = str(error.value).splitlines()
    assert (
        line.startswith("recompprof setting 'labels' (argument)")
        and "'team' is given twice" in line
    )
    assert recompprof._capture.session.current() is None
