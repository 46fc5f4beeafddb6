"""An ACP host built with the official Python SDK (agent-client-protocol),
spawning its agent as the SDK does: with the SDK's trimmed environment (HOME,
LOGNAME, PATH, SHELL, TERM, USER only) and the agent's stderr piped and never
read. Sends `initialize` (and, with --cwd, `session/new`) and prints one JSON
object with what came back.

usage: python python-host.py [--cwd DIR] [--timeout S] -- COMMAND ARGS...
"""

import asyncio
import json
import sys
import time

import acp
from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation


class Host:
    """A client that offers nothing but a permission answer."""

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        return {"outcome": {"outcome": "cancelled"}}

    async def session_update(self, session_id, update, **kwargs):
        pass


async def main() -> int:
    argv = sys.argv[1:]
    sep = argv.index("--")
    opts = dict(zip(argv[:sep:2], argv[1:sep:2]))
    command, *args = argv[sep + 1 :]
    timeout = float(opts.get("--timeout", "120"))
    result: dict = {}
    begin = time.monotonic()
    async with acp.spawn_agent_process(Host(), command, *args) as (conn, process):
        try:
            init = await asyncio.wait_for(
                conn.initialize(
                    protocol_version=acp.PROTOCOL_VERSION,
                    client_capabilities=ClientCapabilities(
                        fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
                        terminal=True,
                    ),
                    client_info=Implementation(name="boxd-python-host", version="0.1.0"),
                ),
                timeout,
            )
            result["initialize"] = init.model_dump(by_alias=True, exclude_none=True)
            result["initializeMs"] = round((time.monotonic() - begin) * 1000)
            if "--cwd" in opts:
                session = await asyncio.wait_for(conn.new_session(cwd=opts["--cwd"], mcp_servers=[]), timeout)
                result["session"] = session.model_dump(by_alias=True, exclude_none=True)
        except Exception as e:  # noqa: BLE001 - reported to the test
            result["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(result), flush=True)
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
