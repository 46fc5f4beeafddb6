"""Sockets the SDK refuses, and starting boxd when nothing answers."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import boxd


def _listen(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(1)
    return s


def test_a_socket_others_may_write_is_refused(scratch: str) -> None:
    path = os.path.join(scratch, "open.sock")
    with _listen(path):
        os.chmod(path, 0o666)
        with pytest.raises(boxd.UntrustedSocket, match="writable by other users"):
            boxd.Client(path, start=False)


def test_a_socket_in_a_group_writable_directory_is_refused(scratch: str) -> None:
    d = os.path.join(scratch, "shared")
    os.mkdir(d)
    os.chmod(d, 0o770)
    path = os.path.join(d, "boxd.sock")
    with _listen(path):
        with pytest.raises(boxd.UntrustedSocket, match="open to other users"):
            boxd.Client(path, start=False)


def test_a_symlink_through_a_writable_directory_is_refused(scratch: str, daemon) -> None:
    d = os.path.join(scratch, "w")
    os.mkdir(d)
    os.chmod(d, 0o777)
    os.symlink(daemon.socket, os.path.join(d, "link.sock"))
    with pytest.raises(boxd.UntrustedSocket, match="not sticky"):
        boxd.Client(os.path.join(d, "link.sock"), start=False)
    # The same daemon through a symlink of ours in a private directory is fine.
    os.symlink(daemon.socket, os.path.join(scratch, "ok.sock"))
    boxd.Client(os.path.join(scratch, "ok.sock"), start=False).close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make another user's socket")
def test_another_user_s_socket_is_refused(scratch: str) -> None:
    path = os.path.join(scratch, "theirs.sock")
    with _listen(path):
        os.chown(path, 4242, 4242)
        with pytest.raises(boxd.UntrustedSocket, match="uid 4242"):
            boxd.Client(path, start=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a listener as another user")
def test_a_socket_another_user_listens_on_is_refused(scratch: str) -> None:
    theirs = tempfile.mkdtemp(prefix="boxd-sdk-py-4242.", dir="/tmp")
    os.chown(theirs, 4242, 4242)
    bound = os.path.join(theirs, "s.sock")
    listener = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import os, socket, sys, time
                os.setgid(4242); os.setuid(4242)
                s = socket.socket(socket.AF_UNIX); s.bind({bound!r}); s.listen(1)
                print("ready", flush=True)
                time.sleep(60)
                """
            ),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert listener.stdout is not None and listener.stdout.readline() == b"ready\n"
        # The file is ours now, in a directory of ours: only the peer is not.
        path = os.path.join(scratch, "moved.sock")
        os.rename(bound, path)
        os.chown(path, 0, 0)
        with pytest.raises(boxd.UntrustedSocket, match="answering on .* runs as uid 4242"):
            boxd.Client(path, start=False)
    finally:
        listener.kill()
        listener.wait()
        shutil.rmtree(theirs, ignore_errors=True)


def test_nothing_answering_is_daemon_not_running(scratch: str) -> None:
    with pytest.raises(boxd.DaemonNotRunning):
        boxd.Client(os.path.join(scratch, "none.sock"), start=False)
    path = os.path.join(scratch, "stale.sock")
    _listen(path).close()  # a socket file nobody listens on
    with pytest.raises(boxd.DaemonNotRunning):
        boxd.Client(path, start=False)


def test_a_boxd_that_fails_to_start_is_reported_at_once(scratch: str) -> None:
    fake = os.path.join(scratch, "fake-boxd")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\necho 'boxd: cannot start: a reason' >&2\nexit 3\n")
    os.chmod(fake, 0o700)
    home = os.path.join(scratch, "home")
    with pytest.raises(boxd.DaemonStartFailed, match="a reason"):
        boxd.Client(os.path.join(scratch, "run", "boxd.sock"), home=home, boxd_bin=fake)


def test_boxd_is_started_when_nothing_answers(scratch: str) -> None:
    home = os.path.join(scratch, "home")
    sock = os.path.join(scratch, "run", "boxd.sock")
    c = boxd.Client(sock, home=home, boxd_bin=os.environ["BOXD_BIN"])
    try:
        assert c.daemon.socket == sock and c.daemon.home == home
        assert c.boxes() == []
        assert os.path.exists(os.path.join(home, "logs", "boxd.stderr"))
    finally:
        pid = c.daemon.pid
        c.close()
        os.kill(pid, 15)
        for _ in range(300):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)


def test_paths_follow_boxd_s_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    from boxd.paths import resolve

    monkeypatch.setenv("BOXD_SOCKET", "/s/b.sock")
    assert resolve().socket == "/s/b.sock"
    monkeypatch.delenv("BOXD_SOCKET")
    monkeypatch.setenv("BOXD_HOME", "/var/tmp/h")
    assert resolve().socket == "/var/tmp/h/run/boxd.sock"
    monkeypatch.delenv("BOXD_HOME")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/7")
    if sys.platform != "darwin":
        assert resolve().socket == "/run/user/7/boxd/boxd.sock"
    with pytest.raises(ValueError, match="longer than"):
        resolve("/" + "x" * 120 + "/boxd.sock")
