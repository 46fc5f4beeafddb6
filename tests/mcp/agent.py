"""An MCP client on the official Python SDK (`mcp`, pinned in
requirements.txt) driving `boxctl mcp` as an agent host would: it spawns
the server on stdio, lists its tools and calls them, then prints one JSON
report (each step's structured result, or its error text) for the Rust test
to check. Arguments: MODE BOXCTL IMAGE PROJECT OUTSIDE [SERVER FLAGS...];
MODE `all` runs every step, `hang` makes a box, starts a command that never
ends, says `calling` on stdout and waits to be killed, `bench:N` times N
`exec` calls of `true` in one session and prints their milliseconds,
`restart` says `calling` during an `exec` that takes 3 s (boxd is restarted
meanwhile) and prints its result."""

import asyncio
import json
import os
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

mode, boxctl, image, project, outside, *flags = sys.argv[1:]


async def main():
    params = StdioServerParameters(
        command=boxctl,
        args=["mcp", *flags],
        # As the SDK does by default: a trimmed environment, plus where the
        # test's daemon is.
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            "BOXD_SOCKET": os.environ["BOXD_SOCKET"],
            "BOXD_HOME": os.environ.get("BOXD_HOME", ""),
            "BOXD_AUTOSTART": "0",
        },
    )
    report = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            report["server"] = init.server_info.name
            tools = await session.list_tools()
            report["tools"] = sorted(t.name for t in tools.tools)
            report["schemas_ok"] = all(
                t.input_schema.get("type") == "object" and t.description
                for t in tools.tools
            )

            async def call(step, tool, /, **args):
                r = await session.call_tool(tool, args)
                if r.is_error:
                    report[step] = {
                        "error": " ".join(getattr(c, "text", "") for c in r.content)
                    }
                else:
                    report[step] = {"ok": r.structured_content}

            if mode.startswith("bench:"):
                await call("create", "create_box", name="mcpbench", image=image)
                times = []
                for _ in range(int(mode.split(":")[1])):
                    t = time.perf_counter()
                    r = await session.call_tool("exec", {"box": "mcpbench", "argv": ["true"]})
                    times.append((time.perf_counter() - t) * 1000)
                    assert not r.is_error, r.content
                await call("remove", "remove_box", name="mcpbench")
                print(json.dumps({"ms": times}))
                return

            if mode.startswith("copybench:"):
                # copy_to_box and copy_from_box of a small file, N each.
                mount = [{"host_path": project, "box_path": "/proj"}]
                await call("create", "create_box", name="copybench", image=image, mounts=mount)
                with open(project + "/small", "w") as f:
                    f.write("x" * 4096)
                times = {"copy_to_box": [], "copy_from_box": []}
                for i in range(int(mode.split(":")[1])):
                    t = time.perf_counter()
                    r = await session.call_tool("copy_to_box", {
                        "box": "copybench", "host_path": project + "/small", "box_path": "/tmp/small"})
                    times["copy_to_box"].append((time.perf_counter() - t) * 1000)
                    assert not r.is_error, r.content
                    t = time.perf_counter()
                    r = await session.call_tool("copy_from_box", {
                        "box": "copybench", "box_path": "/tmp/small", "host_path": project + "/back"})
                    times["copy_from_box"].append((time.perf_counter() - t) * 1000)
                    assert not r.is_error, r.content
                await call("remove", "remove_box", name="copybench")
                print(json.dumps(times))
                return

            if mode.startswith("race:"):
                # Something that writes the project (the box, or here the
                # test standing in for it) flips PROJECT/d between a
                # directory and a symlink to OUTSIDE while the agent copies
                # through PROJECT/d both ways: a copy whose check saw the
                # directory and whose use saw the symlink crosses into OUTSIDE.
                mount = [{"host_path": project, "box_path": "/proj"}]
                await call("create", "create_box", name="racer", image=image, mounts=mount)
                await call("src", "write_file", box="racer", path="/tmp/src", content="box-data\n")
                counts = {"in_ok": 0, "in_refused": 0, "out_ok": 0, "out_refused": 0}
                for i in range(int(mode.split(":")[1])):
                    r = await session.call_tool("copy_to_box", {
                        "box": "racer", "host_path": project + "/d/secret", "box_path": f"/tmp/got{i}"})
                    counts["in_refused" if r.is_error else "in_ok"] += 1
                    r = await session.call_tool("copy_from_box", {
                        "box": "racer", "box_path": "/tmp/src", "host_path": project + f"/d/pwned{i}"})
                    counts["out_refused" if r.is_error else "out_ok"] += 1
                await call("got", "exec", box="racer", shell="cat /tmp/got* 2>/dev/null | sort | uniq -c")
                await call("remove", "remove_box", name="racer")
                report["counts"] = counts
                print(json.dumps(report))
                return

            if mode == "ceiling":
                # A box that asks for nothing, and one that asks for more.
                await call("create", "create_box", name="ceil", image=image)
                await call("over", "create_box", name="ceil2", image=image, memory_mib=4096)
                await call("stats", "box_stats", name="ceil")
                print(json.dumps(report))
                return

            if mode == "restart":
                await call("create", "create_box", name="rs", image=image)
                pending = asyncio.ensure_future(
                    call("exec", "exec", box="rs", shell="sleep 3; echo survived")
                )
                await asyncio.sleep(0.5)
                print("calling", flush=True)
                await pending
                await call("remove", "remove_box", name="rs")
                print(json.dumps(report))
                return

            if mode == "hang":
                await call("create", "create_box", name="hang", image=image)
                asyncio.ensure_future(
                    session.call_tool("exec", {"box": "hang", "argv": ["sleep", "1000"], "timeout_s": 0})
                )
                await asyncio.sleep(0.5)
                print("calling", flush=True)
                await asyncio.sleep(1000)

            mount = [{"host_path": project, "box_path": "/workspace"}]
            await call("create", "create_box", name="m1", image=image, mounts=mount)
            await call("again", "create_box", name="m1", image=image, mounts=mount)
            await call(
                "exec",
                "exec",
                box="m1",
                argv=["sh", "-c", "echo from-box > /workspace/from-box; hostname"],
            )
            await call("shell", "exec", box="m1", shell="echo out; echo err >&2; exit 3")
            await call("binary", "exec", box="m1", shell="printf '\\377\\376'")
            await call("stdin", "exec", box="m1", argv=["cat"], stdin="abc")
            await call("limit", "exec", box="m1", shell="yes | head -c 100000", max_output_bytes=10)
            await call("timeout", "exec", box="m1", shell="sleep 30", timeout_s=1)
            await call("missing", "exec", box="m1", argv=["/no/such/program"])
            await call("neither", "exec", box="m1")
            await call("write", "write_file", box="m1", path="/tmp/x", content="hello")
            await call("read", "read_file", box="m1", path="/tmp/x")
            await call("range", "read_file", box="m1", path="/tmp/x", offset=1, max_bytes=2)
            await call("read_dir", "read_file", box="m1", path="/tmp")
            await call("read_missing", "read_file", box="m1", path="/tmp/nothing")
            await call(
                "copy_out",
                "copy_from_box",
                box="m1",
                box_path="/tmp/x",
                host_path=project + "/copied",
            )
            await call(
                "copy_out_outside",
                "copy_from_box",
                box="m1",
                box_path="/tmp/x",
                host_path=outside + "/copied",
            )
            await call(
                "mount_outside",
                "create_box",
                name="m2",
                image=image,
                mounts=[{"host_path": outside, "box_path": "/o"}],
            )
            await call(
                "mount_dotdot",
                "create_box",
                name="m2",
                image=image,
                mounts=[{"host_path": project + "/../" + os.path.basename(outside), "box_path": "/o"}],
            )
            # The box plants a symlink in the mounted project.
            await call("plant", "exec", box="m1", argv=["ln", "-s", "/", "/workspace/evil"])
            await call(
                "mount_symlink",
                "create_box",
                name="m2",
                image=image,
                mounts=[{"host_path": project + "/evil", "box_path": "/o"}],
            )
            await call("net", "create_box", name="m2", image=image, allow_net=["example.com"])
            await call("publish", "create_box", name="m2", image=image, publish=["8080:80"])
            await call("user_box_exec", "exec", box="userbox", argv=["true"])
            await call("user_box_remove", "remove_box", name="userbox")
            # A long command, read as it goes, then killed.
            await call(
                "long",
                "exec_start",
                box="m1",
                shell="echo one; sleep 1; echo two; sleep 1000",
            )
            exec_id = report["long"].get("ok", {}).get("exec_id", "none")
            await call("long_1", "exec_output", exec_id=exec_id, wait_ms=5000)
            first = report["long_1"].get("ok", {})
            await asyncio.sleep(1.5)
            await call(
                "long_2",
                "exec_output",
                exec_id=exec_id,
                stdout_offset=first.get("next_stdout_offset", 0),
                stderr_offset=first.get("next_stderr_offset", 0),
                wait_ms=5000,
            )
            await call("long_kill", "exec_kill", exec_id=exec_id)
            await asyncio.sleep(0.5)
            await call("long_3", "exec_output", exec_id=exec_id, stdout_offset=8, wait_ms=5000)
            # Files.
            await call("mkdir", "make_dir", box="m1", path="/tmp/d/e")
            await call("write2", "write_file", box="m1", path="/tmp/d/e/f.txt", content="12345")
            await call("write_nodir", "write_file", box="m1", path="/tmp/nodir/y.txt", content="no")
            await call("stat_nodir", "stat_path", box="m1", path="/tmp/nodir")
            await call("ls", "list_files", box="m1", path="/tmp/d/e")
            await call("stat", "stat_path", box="m1", path="/tmp/d")
            await call("rm_nonrecursive", "remove_path", box="m1", path="/tmp/d")
            await call("rm", "remove_path", box="m1", path="/tmp/d", recursive=True)
            await call("stat_gone", "stat_path", box="m1", path="/tmp/d")
            # Snapshots, clones, stats.
            await call("snap_write", "write_file", box="m1", path="/root/state", content="before")
            await call("snap", "snapshot_create", box="m1", name="s1")
            await call("snap_change", "write_file", box="m1", path="/root/state", content="after")
            await call("snaps", "snapshot_list", name="m1")
            await call("stop_for_restore", "stop_box", name="m1")
            await call("restore", "snapshot_restore", box="m1", name="s1")
            await call("start_after", "start_box", name="m1")
            await call("restored", "read_file", box="m1", path="/root/state")
            await call("clone", "clone_box", source="m1", name="m1-copy")
            await call("clone_start", "start_box", name="m1-copy")
            await call("cloned", "read_file", box="m1-copy", path="/root/state")
            await call("stats", "box_stats", name="m1")
            await call("clone_remove", "remove_box", name="m1-copy")
            await call("no_box", "exec", box="nosuchbox", argv=["true"])
            await call("list", "list_boxes")
            await call("stop", "stop_box", name="m1")
            await call("start", "start_box", name="m1")
            await call("remove", "remove_box", name="m1")
    print(json.dumps(report))


asyncio.run(main())
