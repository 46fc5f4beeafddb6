"""Stock grpcio (pinned in requirements.txt) calling boxd on its Unix
socket the way an integrator's first try does: `unix://PATH` and nothing
else, so grpcio sends the socket path as `:authority`, and no .proto file:
the message types come from the server's reflection (grpcio-reflection's
descriptor database). Prints one JSON report. Arguments: SOCKET [BOX]; with
BOX, also a streaming Exec in it."""

import json
import sys

import grpc
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

socket = sys.argv[1]
box = sys.argv[2] if len(sys.argv) > 2 else None
report = {}


def raw_calls(channel):
    # Raw bytes: what any client gets before it has types.
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


def typed(pool, name):
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def reflected_calls(channel):
    pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
    service = pool.FindServiceByName("boxd.v1.Boxd")
    report["methods"] = sorted(m.name for m in service.methods)
    ListReq, ListResp = typed(pool, "boxd.v1.ListBoxesRequest"), typed(pool, "boxd.v1.ListBoxesResponse")
    list_boxes = channel.unary_unary(
        "/boxd.v1.Boxd/ListBoxes",
        request_serializer=ListReq.SerializeToString,
        response_deserializer=ListResp.FromString,
    )
    reply = list_boxes(ListReq(), timeout=10)
    report["boxes"] = [{"name": b.name, "state": b.state} for b in reply.boxes]
    if box is None:
        return
    ExecReq, ExecResp = typed(pool, "boxd.v1.ExecRequest"), typed(pool, "boxd.v1.ExecResponse")
    exec_call = channel.stream_stream(
        "/boxd.v1.Boxd/Exec",
        request_serializer=ExecReq.SerializeToString,
        response_deserializer=ExecResp.FromString,
    )

    def requests():
        start = ExecReq()
        start.start.box_name = box
        start.start.command = "sh"
        start.start.args.extend(["-c", "cat; echo to-stderr >&2; exit 3"])
        start.start.stdin = True
        yield start
        yield ExecReq(stdin=b"hello \x00\xff from grpcio\n")
        yield ExecReq(close_stdin=True)

    out, err, kinds = b"", b"", []
    for msg in exec_call(requests(), timeout=30):
        kind = msg.WhichOneof("event")
        kinds.append(kind)
        if kind == "stdout":
            out += msg.stdout
        elif kind == "stderr":
            err += msg.stderr
        elif kind == "exit":
            report["exit_code"] = msg.exit.code
    report["first"] = kinds[0] if kinds else None
    report["last"] = kinds[-1] if kinds else None
    report["stdout_hex"] = out.hex()
    report["stderr"] = err.decode()


def health(channel):
    stub = health_pb2_grpc.HealthStub(channel)
    for name in ("", "boxd.v1.Boxd"):
        reply = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
        report["health " + (name or "server")] = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


with grpc.insecure_channel("unix://" + socket) as channel:
    raw_calls(channel)
    reflected_calls(channel)
    health(channel)
print(json.dumps(report))
