"""The asyncio client: the same calls, awaited."""

from __future__ import annotations

import asyncio
import uuid

import boxd


def test_async_client(daemon, image: str) -> None:
    async def main() -> None:
        async with await boxd.AsyncClient.connect(daemon.socket, start=False) as client:
            assert client.daemon.protocol == "boxd.v1"
            events = client.events(initial=True)
            async for e in events:
                if e.synced:
                    break
            box = await client.create_or_reuse(f"a-{uuid.uuid4().hex[:8]}", image)
            try:
                states = []
                async for e in events:
                    if e.name == box.name:
                        states.append(e.state)
                        if e.state is boxd.BoxState.RUNNING:
                            break
                await events.aclose()
                assert states[0] is boxd.BoxState.CREATED and states[-1] is boxd.BoxState.RUNNING

                r = await box.exec(["cat"], stdin=bytes(range(256)) * 1000)
                assert r.stdout == bytes(range(256)) * 1000

                p = await box.spawn(["sh", "-c", "echo go; exec sleep 60"], stdin=False)
                async for chunk in p:
                    assert chunk == boxd.Output(boxd.Stream.STDOUT, b"go\n")
                    await p.signal(9)
                assert p.exit is not None and p.exit.signal == 9

                await box.files.write("/tmp/a", b"async")
                assert await box.files.read("/tmp/a") == b"async"
                both = await asyncio.gather(box.exec(["echo", "1"]), box.exec(["echo", "2"]))
                assert [x.text for x in both] == ["1\n", "2\n"]
                try:
                    await client.box("missing").inspect()
                    raise AssertionError("no error")
                except boxd.NotFound as e:
                    assert "missing" in e.message
            finally:
                await box.remove(force=True)

    asyncio.run(main())
