"""Stock grpcio (pinned in requirements.txt) calling boxd on its Unix
socket the way an integrator's first try does: `unix://PATH` and nothing
else, so grpcio sends the socket path as `:authority`. Calls Describe and
ListBoxes with raw bytes (no generated code needed) and prints one JSON
report. Argument: SOCKET."""

import json
import sys

import grpc

socket = sys.argv[1]
report = {}
with grpc.insecure_channel("unix://" + socket) as channel:
    for method in ("Describe", "ListBoxes"):
        call = channel.unary_unary(
            "/boxd.v1.Boxd/" + method,
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            reply = call(b"", timeout=10)
            report[method] = {"ok": True, "bytes": len(reply), "has_protocol": b"boxd.v1" in reply}
        except grpc.RpcError as e:
            report[method] = {"ok": False, "code": str(e.code()), "details": e.details()}
print(json.dumps(report))
