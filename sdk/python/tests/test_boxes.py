"""Boxes, commands, files, events and errors through the blocking client."""

from __future__ import annotations

import io
import os
import tarfile
import threading
import uuid

import pytest

import boxd
from boxd import _files


def test_create_then_reuse(client: boxd.Client, image: str) -> None:
    name = f"reuse-{uuid.uuid4().hex[:8]}"
    first = client.create_or_reuse(name, image=image, env={"A": "1"}, memory=256)
    try:
        assert first.created is True
        again = client.create_or_reuse(name, image=image)
        assert again.created is False
        info = again.inspect()
        assert info.state is boxd.BoxState.RUNNING
        assert info.spec.env == {"A": "1"}
        assert info.spec.memory_mib == 256
        assert name in [b.name for b in client.boxes()]
        with pytest.raises(boxd.AlreadyExists):
            client.create_box(name, image, if_exists=boxd.IfExists.FAIL)
    finally:
        first.remove(force=True)
    with pytest.raises(boxd.NotFound):
        client.box(name).inspect()


def test_exec_output_is_byte_exact(box: boxd.Box) -> None:
    every_byte = bytes(range(256))
    r = box.exec(["cat"], stdin=every_byte)
    assert r.stdout == every_byte and r.exit_code == 0
    big = os.urandom(5 << 20)
    r = box.exec(["cat"], stdin=big)
    assert len(r.stdout) == len(big) and r.stdout == big
    r = box.exec(["sh", "-c", "printf out; printf err >&2; exit 3"])
    assert (r.stdout, r.stderr, r.exit_code, r.signal) == (b"out", b"err", 3, None)
    with pytest.raises(boxd.ExecError, match="exited 3: err"):
        r.check()
    assert (
        box.exec(["sh", "-c", "echo $GREETING; pwd"], env={"GREETING": "hé"}, cwd="/tmp").text == "hé\n/tmp\n"
    )
    assert box.exec(["sleep", "10"], timeout=0.3).timed_out
    with pytest.raises(TypeError):
        box.exec("ls -l")  # type: ignore[arg-type]


def test_streaming_exec_is_fed_and_killed_by_a_signal(box: boxd.Box) -> None:
    p = box.spawn(["cat"])
    p.write(b"one\n")
    chunks = iter(p)
    assert next(chunks) == boxd.Output(boxd.Stream.STDOUT, b"one\n")
    p.write("two\n")
    assert next(chunks).data == b"two\n"
    p.close_stdin()
    assert list(chunks) == []
    assert p.exit is not None and p.exit.code == 0

    p = box.spawn(["sh", "-c", "echo ready; exec sleep 60"], stdin=False)
    out = iter(p)
    assert next(out).data == b"ready\n"
    p.signal("TERM")
    assert list(out) == []
    assert p.exit is not None and p.exit.signal == 15 and p.exit.code is None
    with pytest.raises(boxd.FailedPrecondition):
        p.signal("KILL")
    with pytest.raises(boxd.FailedPrecondition):
        box.client.send_input(p.exec_id, b"late")


def test_tty_exec(box: boxd.Box) -> None:
    p = box.spawn(["sh", "-c", "stty size"], stdin=False, tty=True, tty_size=(33, 101))
    r = p.wait()
    assert b"33 101" in r.stdout and r.exit_code == 0


def test_files_round_trip(box: boxd.Box, scratch: str) -> None:
    blob = os.urandom(3 << 20) + bytes(range(256))
    box.files.write("/tmp/blob.bin", blob, mode=0o600)
    assert box.files.read("/tmp/blob.bin") == blob
    box.files.write("/tmp/hello.txt", "hello\n")
    listing = {e.name: e for e in box.files.list("/tmp")}
    assert listing["blob.bin"].kind == "file" and listing["blob.bin"].size == len(blob)
    assert listing["blob.bin"].mode == 0o600
    assert listing["hello.txt"].size == 6
    with pytest.raises(boxd.NotFound):
        box.files.read("/tmp/missing")
    with pytest.raises(boxd.InvalidArgument):
        box.files.read("/tmp")

    src = os.path.join(scratch, "tree")
    os.makedirs(os.path.join(src, "sub"))
    with open(os.path.join(src, "sub", "f.txt"), "wb") as f:
        f.write(b"in a tree\n")
    os.symlink("sub/f.txt", os.path.join(src, "link"))
    box.files.copy_in(src, "/tmp")
    assert box.exec(["cat", "/tmp/tree/link"]).check().stdout == b"in a tree\n"
    assert box.exec(["readlink", "/tmp/tree/link"]).text == "sub/f.txt\n"

    box.exec(["sh", "-c", "ln -s /etc/passwd /tmp/tree/abs"]).check()
    dest = os.path.join(scratch, "out")
    os.mkdir(dest)
    assert box.files.copy_out("/tmp/tree", dest) == ["tree"]
    with open(os.path.join(dest, "tree", "sub", "f.txt"), "rb") as f:
        assert f.read() == b"in a tree\n"
    assert os.readlink(os.path.join(dest, "tree", "link")) == "sub/f.txt"
    # A link that leads out is made as a link, never followed.
    assert os.readlink(os.path.join(dest, "tree", "abs")) == "/etc/passwd"


def _tar(*members: tarfile.TarInfo) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for m in members:
            t.addfile(m, io.BytesIO(b"x" * m.size) if m.isfile() else None)
    return buf


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 1) -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type = kind
    m.linkname = link
    m.size = size if kind == tarfile.REGTYPE else 0
    return m


@pytest.mark.parametrize(
    "members",
    [
        [_member("../evil")],
        [_member("/abs")],
        [_member("a", tarfile.SYMTYPE, "/etc"), _member("a/passwd")],
        [_member("a", tarfile.SYMTYPE, ".."), _member("a/escaped")],
        [_member("h", tarfile.LNKTYPE, "../../etc/passwd")],
        [_member("ok", tarfile.SYMTYPE, "/etc/passwd"), _member("ok")],
    ],
)
def test_unpacking_what_a_box_sent_never_leaves_the_destination(scratch: str, members: list) -> None:
    dest = os.path.join(scratch, "dest")
    os.mkdir(dest)
    with pytest.raises(boxd.UnsafeArchive):
        _files.extract(_tar(*members), dest)
    assert not os.path.exists(os.path.join(scratch, "evil"))
    assert not os.path.exists(os.path.join(scratch, "escaped"))


def test_devices_are_skipped(scratch: str) -> None:
    assert _files.extract(_tar(_member("dev", tarfile.CHRTYPE), _member("f")), scratch) == ["f"]
    assert not os.path.exists(os.path.join(scratch, "dev"))


def test_events_initial_then_synced_then_live(client: boxd.Client, box: boxd.Box) -> None:
    events = client.events(initial=True)
    initial = []
    for e in events:
        if e.synced:
            assert e.name == ""
            break
        assert e.initial
        initial.append(e)
    assert box.name in [e.name for e in initial]
    assert [e.state for e in initial if e.name == box.name] == [boxd.BoxState.RUNNING]

    box.stop()
    box.snapshot("s1")
    box.restore("s1")
    box.start()
    seen = []
    for e in events:
        assert not e.initial and not e.synced
        if e.name == box.name:
            seen.append(e.state)
            if e.state is boxd.BoxState.RUNNING:
                break
    events.close()  # type: ignore[attr-defined]
    assert seen[0] is boxd.BoxState.STOPPING and boxd.BoxState.STOPPED in seen
    assert seen[-2:] == [boxd.BoxState.STARTING, boxd.BoxState.RUNNING]
    assert [s.name for s in box.snapshots()] == ["s1"]
    box.remove_snapshot("s1")
    assert box.snapshots() == []


def test_clone_stats_ports_update(client: boxd.Client, box: boxd.Box) -> None:
    box.files.write("/root/mark", b"cloned")
    twin = box.clone(box.name + "-c")
    try:
        assert twin.created is True
        twin.start()
        assert twin.files.read("/root/mark") == b"cloned"
    finally:
        twin.remove(force=True)
    stat = box.stats()
    assert stat.name == box.name and stat.pids >= 1
    assert box.ports() == ()
    info, _warnings = box.update(memory=300)
    assert info.spec.memory_mib == 300
    with pytest.raises(boxd.InvalidArgument):
        box.update()


def test_exec_survives_a_daemon_restart(daemon, client: boxd.Client, box: boxd.Box) -> None:
    results = []

    def run() -> None:
        results.append(box.exec(["sh", "-c", "sleep 2; echo survived"]))

    t = threading.Thread(target=run)
    t.start()
    # Wait until it runs, then restart boxd under it.
    deadline = 50
    while not client.execs(box.name) and deadline:
        deadline -= 1
        threading.Event().wait(0.1)
    assert client.execs(box.name), "the exec did not start"
    daemon.restart()
    t.join(60)
    assert not t.is_alive()
    (r,) = results
    assert (r.text, r.exit_code) == ("survived\n", 0)
    # The client itself goes on after the restart.
    assert box.inspect().state is boxd.BoxState.RUNNING


def test_errors_carry_the_daemon_s_message(client: boxd.Client, image: str) -> None:
    with pytest.raises(boxd.NotFound, match="nope"):
        client.box("nope").inspect()
    with pytest.raises(boxd.NotFound):
        client.box("nope").exec(["true"])
    with pytest.raises(boxd.BoxdError) as bad:
        client.create_or_reuse("bad-image", image="/nonexistent/oci-layout")
    assert "/nonexistent/oci-layout" in str(bad.value)
    assert "bad-image" not in [b.name for b in client.boxes()]
    with pytest.raises(boxd.InvalidArgument):
        client.create_or_reuse("-bad name", image=image)
    with pytest.raises(ValueError):
        client.create_or_reuse("x", image=image, ports=["a:b"])
