"""Process log files: one per process (indexed claim), size-based rotation, listing and tails."""
from __future__ import annotations

import logging
import os

import pytest

from millstream.runtime import config as cfg
from millstream.runtime.entrypoint.log_files import ProcessLog, configured_log_dir, install_process_log, read_tail


def _write(process_log: ProcessLog, text: str) -> None:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, text, None, None)
    process_log.handler.emit(record)


def test_two_processes_of_one_role_on_one_host_get_their_own_files(tmp_path) -> None:
    first = ProcessLog(str(tmp_path), "taskmanager", 1 << 20, 2, host="h1")
    second = ProcessLog(str(tmp_path), "taskmanager", 1 << 20, 2, host="h1")
    try:
        assert first.name == "millstream-taskmanager-0-h1.log"
        assert second.name == "millstream-taskmanager-1-h1.log"
    finally:
        first.close()
        second.close()
    again = ProcessLog(str(tmp_path), "taskmanager", 1 << 20, 2, host="h1")  # the claim died with its holder
    assert again.name == "millstream-taskmanager-0-h1.log"
    again.close()


def test_rotation_keeps_the_configured_number_of_backups(tmp_path) -> None:
    process_log = ProcessLog(str(tmp_path), "jobmanager", 200, 2, host="h")
    for i in range(30):
        _write(process_log, f"line {i:02d} " + "x" * 40)
    names = [f.name for f in process_log.files()]
    assert names == ["millstream-jobmanager-0-h.log", "millstream-jobmanager-0-h.log.1", "millstream-jobmanager-0-h.log.2"]
    assert all(f.size <= 200 for f in process_log.files())
    assert "line 29" in read_tail(process_log.path)
    assert process_log.resolve("millstream-jobmanager-0-h.log.2") == os.path.join(tmp_path, "millstream-jobmanager-0-h.log.2")
    assert process_log.resolve("../etc/passwd") is None
    assert process_log.resolve("millstream-jobmanager-0-h.log.3") is None  # deleted by the rotation
    process_log.close()


def test_tail_starts_at_a_whole_line(tmp_path) -> None:
    path = tmp_path / "f.log"
    path.write_text("".join(f"line {i}\n" for i in range(100)))
    tail = read_tail(str(path), 30)
    assert tail.endswith("line 99\n")
    assert all(line.startswith("line ") for line in tail.splitlines())
    assert len(tail) <= 30


def test_bad_rotation_settings_name_the_option(tmp_path) -> None:
    with pytest.raises(cfg.ConfigurationError, match="env.log.max"):
        ProcessLog(str(tmp_path), "jobmanager", 100, 0)
    with pytest.raises(cfg.ConfigurationError, match="log.file.max-size"):
        ProcessLog(str(tmp_path), "jobmanager", 0, 1)


def test_the_log_dir_comes_from_env_log_dir_else_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MILLSTREAM_LOG_DIR", str(tmp_path / "env"))
    assert configured_log_dir(cfg.load_configuration(None)) == str(tmp_path / "env")
    configured = cfg.load_configuration(None, dynamic_properties=[f"env.log.dir={tmp_path / 'conf'}"])
    assert configured_log_dir(configured) == str(tmp_path / "conf")


def test_install_sends_root_records_to_the_file(tmp_path) -> None:
    configuration = cfg.load_configuration(None, dynamic_properties=[
        f"env.log.dir={tmp_path}", "log.file.max-size=1mb", "env.log.max=3"])
    process_log = install_process_log("jobmanager", configuration)
    try:
        assert process_log.handler.maxBytes == 1 << 20 and process_log.handler.backupCount == 3
        logging.getLogger("millstream.test").warning("hello from the test")
        process_log.handler.flush()
        assert "WARNING millstream.test: hello from the test" in read_tail(process_log.path)
    finally:
        logging.getLogger().removeHandler(process_log.handler)
        process_log.close()
