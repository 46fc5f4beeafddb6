from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BoxState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BOX_STATE_UNSPECIFIED: _ClassVar[BoxState]
    BOX_STATE_CREATED: _ClassVar[BoxState]
    BOX_STATE_STARTING: _ClassVar[BoxState]
    BOX_STATE_RUNNING: _ClassVar[BoxState]
    BOX_STATE_STOPPING: _ClassVar[BoxState]
    BOX_STATE_STOPPED: _ClassVar[BoxState]
    BOX_STATE_REMOVED: _ClassVar[BoxState]
    BOX_STATE_FAILED: _ClassVar[BoxState]

class IfExists(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IF_EXISTS_REUSE: _ClassVar[IfExists]
    IF_EXISTS_SAME_SPEC: _ClassVar[IfExists]
    IF_EXISTS_REPLACE: _ClassVar[IfExists]
    IF_EXISTS_FAIL: _ClassVar[IfExists]
BOX_STATE_UNSPECIFIED: BoxState
BOX_STATE_CREATED: BoxState
BOX_STATE_STARTING: BoxState
BOX_STATE_RUNNING: BoxState
BOX_STATE_STOPPING: BoxState
BOX_STATE_STOPPED: BoxState
BOX_STATE_REMOVED: BoxState
BOX_STATE_FAILED: BoxState
IF_EXISTS_REUSE: IfExists
IF_EXISTS_SAME_SPEC: IfExists
IF_EXISTS_REPLACE: IfExists
IF_EXISTS_FAIL: IfExists

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeResponse(_message.Message):
    __slots__ = ("protocol", "daemon_version", "pid", "engine", "engine_version", "isolation", "capabilities", "notes", "network_filtering", "socket", "home", "engine_host", "engine_problem")
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    DAEMON_VERSION_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_VERSION_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FILTERING_FIELD_NUMBER: _ClassVar[int]
    SOCKET_FIELD_NUMBER: _ClassVar[int]
    HOME_FIELD_NUMBER: _ClassVar[int]
    ENGINE_HOST_FIELD_NUMBER: _ClassVar[int]
    ENGINE_PROBLEM_FIELD_NUMBER: _ClassVar[int]
    protocol: str
    daemon_version: str
    pid: int
    engine: str
    engine_version: str
    isolation: str
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    notes: _containers.RepeatedScalarFieldContainer[str]
    network_filtering: bool
    socket: str
    home: str
    engine_host: str
    engine_problem: str
    def __init__(self, protocol: _Optional[str] = ..., daemon_version: _Optional[str] = ..., pid: _Optional[int] = ..., engine: _Optional[str] = ..., engine_version: _Optional[str] = ..., isolation: _Optional[str] = ..., capabilities: _Optional[_Iterable[str]] = ..., notes: _Optional[_Iterable[str]] = ..., network_filtering: bool = ..., socket: _Optional[str] = ..., home: _Optional[str] = ..., engine_host: _Optional[str] = ..., engine_problem: _Optional[str] = ...) -> None: ...

class Mount(_message.Message):
    __slots__ = ("host_path", "guest_path", "read_only")
    HOST_PATH_FIELD_NUMBER: _ClassVar[int]
    GUEST_PATH_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    host_path: str
    guest_path: str
    read_only: bool
    def __init__(self, host_path: _Optional[str] = ..., guest_path: _Optional[str] = ..., read_only: bool = ...) -> None: ...

class BoxSpec(_message.Message):
    __slots__ = ("image", "cpus", "memory_mib", "disk_size_gb", "mounts", "allow_net", "env", "working_dir", "secrets", "ports", "keep_id")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    DISK_SIZE_GB_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_NET_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    KEEP_ID_FIELD_NUMBER: _ClassVar[int]
    image: str
    cpus: int
    memory_mib: int
    disk_size_gb: int
    mounts: _containers.RepeatedCompositeFieldContainer[Mount]
    allow_net: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    working_dir: str
    secrets: _containers.RepeatedCompositeFieldContainer[Secret]
    ports: _containers.RepeatedCompositeFieldContainer[PortMapping]
    keep_id: KeepId
    def __init__(self, image: _Optional[str] = ..., cpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., disk_size_gb: _Optional[int] = ..., mounts: _Optional[_Iterable[_Union[Mount, _Mapping]]] = ..., allow_net: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., working_dir: _Optional[str] = ..., secrets: _Optional[_Iterable[_Union[Secret, _Mapping]]] = ..., ports: _Optional[_Iterable[_Union[PortMapping, _Mapping]]] = ..., keep_id: _Optional[_Union[KeepId, _Mapping]] = ...) -> None: ...

class KeepId(_message.Message):
    __slots__ = ("uid", "gid")
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    uid: int
    gid: int
    def __init__(self, uid: _Optional[int] = ..., gid: _Optional[int] = ...) -> None: ...

class PortMapping(_message.Message):
    __slots__ = ("host_ip", "host_port", "box_port", "protocol")
    HOST_IP_FIELD_NUMBER: _ClassVar[int]
    HOST_PORT_FIELD_NUMBER: _ClassVar[int]
    BOX_PORT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    host_ip: str
    host_port: int
    box_port: int
    protocol: str
    def __init__(self, host_ip: _Optional[str] = ..., host_port: _Optional[int] = ..., box_port: _Optional[int] = ..., protocol: _Optional[str] = ...) -> None: ...

class Secret(_message.Message):
    __slots__ = ("name", "hosts", "placeholder", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    PLACEHOLDER_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    hosts: _containers.RepeatedScalarFieldContainer[str]
    placeholder: str
    value: str
    def __init__(self, name: _Optional[str] = ..., hosts: _Optional[_Iterable[str]] = ..., placeholder: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class BoxInfo(_message.Message):
    __slots__ = ("id", "name", "state", "image", "image_digest", "created_at_ms", "started_at_ms", "isolation", "engine", "spec", "running_execs", "error", "disk_bytes", "ports", "engine_host")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    RUNNING_EXECS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_HOST_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    state: BoxState
    image: str
    image_digest: str
    created_at_ms: int
    started_at_ms: int
    isolation: str
    engine: str
    spec: BoxSpec
    running_execs: int
    error: str
    disk_bytes: int
    ports: _containers.RepeatedCompositeFieldContainer[PortMapping]
    engine_host: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[_Union[BoxState, str]] = ..., image: _Optional[str] = ..., image_digest: _Optional[str] = ..., created_at_ms: _Optional[int] = ..., started_at_ms: _Optional[int] = ..., isolation: _Optional[str] = ..., engine: _Optional[str] = ..., spec: _Optional[_Union[BoxSpec, _Mapping]] = ..., running_execs: _Optional[int] = ..., error: _Optional[str] = ..., disk_bytes: _Optional[int] = ..., ports: _Optional[_Iterable[_Union[PortMapping, _Mapping]]] = ..., engine_host: _Optional[str] = ...) -> None: ...

class CreateBoxRequest(_message.Message):
    __slots__ = ("name", "spec", "if_exists")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec: BoxSpec
    if_exists: IfExists
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[_Union[BoxSpec, _Mapping]] = ..., if_exists: _Optional[_Union[IfExists, str]] = ...) -> None: ...

class CreateBoxResponse(_message.Message):
    __slots__ = ("box", "created", "warnings", "elapsed_ms", "replaced")
    BOX_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    box: BoxInfo
    created: bool
    warnings: _containers.RepeatedScalarFieldContainer[str]
    elapsed_ms: int
    replaced: bool
    def __init__(self, box: _Optional[_Union[BoxInfo, _Mapping]] = ..., created: bool = ..., warnings: _Optional[_Iterable[str]] = ..., elapsed_ms: _Optional[int] = ..., replaced: bool = ...) -> None: ...

class StartBoxRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class StartBoxResponse(_message.Message):
    __slots__ = ("box", "boot_ms")
    BOX_FIELD_NUMBER: _ClassVar[int]
    BOOT_MS_FIELD_NUMBER: _ClassVar[int]
    box: BoxInfo
    boot_ms: int
    def __init__(self, box: _Optional[_Union[BoxInfo, _Mapping]] = ..., boot_ms: _Optional[int] = ...) -> None: ...

class StopBoxRequest(_message.Message):
    __slots__ = ("name", "force")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    def __init__(self, name: _Optional[str] = ..., force: bool = ...) -> None: ...

class StopBoxResponse(_message.Message):
    __slots__ = ("box",)
    BOX_FIELD_NUMBER: _ClassVar[int]
    box: BoxInfo
    def __init__(self, box: _Optional[_Union[BoxInfo, _Mapping]] = ...) -> None: ...

class UpdateBoxRequest(_message.Message):
    __slots__ = ("name", "cpus", "memory_mib", "allow_net")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    ALLOW_NET_FIELD_NUMBER: _ClassVar[int]
    name: str
    cpus: int
    memory_mib: int
    allow_net: AllowNet
    def __init__(self, name: _Optional[str] = ..., cpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., allow_net: _Optional[_Union[AllowNet, _Mapping]] = ...) -> None: ...

class AllowNet(_message.Message):
    __slots__ = ("hosts",)
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, hosts: _Optional[_Iterable[str]] = ...) -> None: ...

class UpdateBoxResponse(_message.Message):
    __slots__ = ("box", "warnings")
    BOX_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    box: BoxInfo
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, box: _Optional[_Union[BoxInfo, _Mapping]] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class RemoveBoxRequest(_message.Message):
    __slots__ = ("name", "force")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    def __init__(self, name: _Optional[str] = ..., force: bool = ...) -> None: ...

class RemoveBoxResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListBoxesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListBoxesResponse(_message.Message):
    __slots__ = ("boxes",)
    BOXES_FIELD_NUMBER: _ClassVar[int]
    boxes: _containers.RepeatedCompositeFieldContainer[BoxInfo]
    def __init__(self, boxes: _Optional[_Iterable[_Union[BoxInfo, _Mapping]]] = ...) -> None: ...

class InspectBoxRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class WatchBoxesRequest(_message.Message):
    __slots__ = ("since_ms", "until_ms", "initial")
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_FIELD_NUMBER: _ClassVar[int]
    since_ms: int
    until_ms: int
    initial: bool
    def __init__(self, since_ms: _Optional[int] = ..., until_ms: _Optional[int] = ..., initial: bool = ...) -> None: ...

class BoxEvent(_message.Message):
    __slots__ = ("box_id", "name", "state", "elapsed_ms", "at_ms", "message", "initial", "synced")
    BOX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    INITIAL_FIELD_NUMBER: _ClassVar[int]
    SYNCED_FIELD_NUMBER: _ClassVar[int]
    box_id: str
    name: str
    state: BoxState
    elapsed_ms: int
    at_ms: int
    message: str
    initial: bool
    synced: bool
    def __init__(self, box_id: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[_Union[BoxState, str]] = ..., elapsed_ms: _Optional[int] = ..., at_ms: _Optional[int] = ..., message: _Optional[str] = ..., initial: bool = ..., synced: bool = ...) -> None: ...

class TtySize(_message.Message):
    __slots__ = ("rows", "cols")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    cols: int
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

class ExecStart(_message.Message):
    __slots__ = ("box_name", "command", "args", "env", "working_dir", "timeout_ms", "stdin", "tty", "tty_size", "detach", "resumable", "user")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BOX_NAME_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    TTY_SIZE_FIELD_NUMBER: _ClassVar[int]
    DETACH_FIELD_NUMBER: _ClassVar[int]
    RESUMABLE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    box_name: str
    command: str
    args: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    working_dir: str
    timeout_ms: int
    stdin: bool
    tty: bool
    tty_size: TtySize
    detach: bool
    resumable: bool
    user: str
    def __init__(self, box_name: _Optional[str] = ..., command: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., working_dir: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., stdin: bool = ..., tty: bool = ..., tty_size: _Optional[_Union[TtySize, _Mapping]] = ..., detach: bool = ..., resumable: bool = ..., user: _Optional[str] = ...) -> None: ...

class ExecAttach(_message.Message):
    __slots__ = ("exec_id", "stdout_offset", "stderr_offset", "resumable")
    EXEC_ID_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RESUMABLE_FIELD_NUMBER: _ClassVar[int]
    exec_id: str
    stdout_offset: int
    stderr_offset: int
    resumable: bool
    def __init__(self, exec_id: _Optional[str] = ..., stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ..., resumable: bool = ...) -> None: ...

class ExecAck(_message.Message):
    __slots__ = ("stdout_offset", "stderr_offset")
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    stdout_offset: int
    stderr_offset: int
    def __init__(self, stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ...) -> None: ...

class Signal(_message.Message):
    __slots__ = ("signal",)
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    signal: str
    def __init__(self, signal: _Optional[str] = ...) -> None: ...

class ExecRequest(_message.Message):
    __slots__ = ("start", "attach", "stdin", "close_stdin", "signal", "resize", "ack")
    START_FIELD_NUMBER: _ClassVar[int]
    ATTACH_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    CLOSE_STDIN_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    start: ExecStart
    attach: ExecAttach
    stdin: bytes
    close_stdin: bool
    signal: Signal
    resize: TtySize
    ack: ExecAck
    def __init__(self, start: _Optional[_Union[ExecStart, _Mapping]] = ..., attach: _Optional[_Union[ExecAttach, _Mapping]] = ..., stdin: _Optional[bytes] = ..., close_stdin: bool = ..., signal: _Optional[_Union[Signal, _Mapping]] = ..., resize: _Optional[_Union[TtySize, _Mapping]] = ..., ack: _Optional[_Union[ExecAck, _Mapping]] = ...) -> None: ...

class ExecStarted(_message.Message):
    __slots__ = ("exec_id", "launch_ms", "stdout_offset", "stderr_offset", "stdin_offset")
    EXEC_ID_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_MS_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    exec_id: str
    launch_ms: int
    stdout_offset: int
    stderr_offset: int
    stdin_offset: int
    def __init__(self, exec_id: _Optional[str] = ..., launch_ms: _Optional[int] = ..., stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ..., stdin_offset: _Optional[int] = ...) -> None: ...

class ExecExit(_message.Message):
    __slots__ = ("code", "signal", "error", "timed_out")
    CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    code: int
    signal: int
    error: str
    timed_out: bool
    def __init__(self, code: _Optional[int] = ..., signal: _Optional[int] = ..., error: _Optional[str] = ..., timed_out: bool = ...) -> None: ...

class ExecResponse(_message.Message):
    __slots__ = ("started", "stdout", "stderr", "exit", "stdin_offset")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    STDIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    started: ExecStarted
    stdout: bytes
    stderr: bytes
    exit: ExecExit
    stdin_offset: int
    def __init__(self, started: _Optional[_Union[ExecStarted, _Mapping]] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit: _Optional[_Union[ExecExit, _Mapping]] = ..., stdin_offset: _Optional[int] = ...) -> None: ...

class SendInputRequest(_message.Message):
    __slots__ = ("exec_id", "data", "close")
    EXEC_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    exec_id: str
    data: bytes
    close: bool
    def __init__(self, exec_id: _Optional[str] = ..., data: _Optional[bytes] = ..., close: bool = ...) -> None: ...

class SendInputResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SignalExecRequest(_message.Message):
    __slots__ = ("exec_id", "signal")
    EXEC_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    exec_id: str
    signal: Signal
    def __init__(self, exec_id: _Optional[str] = ..., signal: _Optional[_Union[Signal, _Mapping]] = ...) -> None: ...

class SignalExecResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResizeExecRequest(_message.Message):
    __slots__ = ("exec_id", "size")
    EXEC_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    exec_id: str
    size: TtySize
    def __init__(self, exec_id: _Optional[str] = ..., size: _Optional[_Union[TtySize, _Mapping]] = ...) -> None: ...

class ResizeExecResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListExecsRequest(_message.Message):
    __slots__ = ("box_name",)
    BOX_NAME_FIELD_NUMBER: _ClassVar[int]
    box_name: str
    def __init__(self, box_name: _Optional[str] = ...) -> None: ...

class ExecInfo(_message.Message):
    __slots__ = ("exec_id", "box_name", "command", "args", "started_at_ms", "tty", "detach", "attached", "exited", "exit")
    EXEC_ID_FIELD_NUMBER: _ClassVar[int]
    BOX_NAME_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    DETACH_FIELD_NUMBER: _ClassVar[int]
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    exec_id: str
    box_name: str
    command: str
    args: _containers.RepeatedScalarFieldContainer[str]
    started_at_ms: int
    tty: bool
    detach: bool
    attached: int
    exited: bool
    exit: ExecExit
    def __init__(self, exec_id: _Optional[str] = ..., box_name: _Optional[str] = ..., command: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., started_at_ms: _Optional[int] = ..., tty: bool = ..., detach: bool = ..., attached: _Optional[int] = ..., exited: bool = ..., exit: _Optional[_Union[ExecExit, _Mapping]] = ...) -> None: ...

class ListExecsResponse(_message.Message):
    __slots__ = ("execs",)
    EXECS_FIELD_NUMBER: _ClassVar[int]
    execs: _containers.RepeatedCompositeFieldContainer[ExecInfo]
    def __init__(self, execs: _Optional[_Iterable[_Union[ExecInfo, _Mapping]]] = ...) -> None: ...

class ImageInfo(_message.Message):
    __slots__ = ("references", "digest", "repo_digest", "size", "layers", "os", "architecture", "added_at_ms", "used_by", "env", "working_dir", "cmd", "entrypoint")
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    REPO_DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    OS_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    ADDED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    USED_BY_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    CMD_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    references: _containers.RepeatedScalarFieldContainer[str]
    digest: str
    repo_digest: str
    size: int
    layers: int
    os: str
    architecture: str
    added_at_ms: int
    used_by: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.RepeatedScalarFieldContainer[str]
    working_dir: str
    cmd: _containers.RepeatedScalarFieldContainer[str]
    entrypoint: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, references: _Optional[_Iterable[str]] = ..., digest: _Optional[str] = ..., repo_digest: _Optional[str] = ..., size: _Optional[int] = ..., layers: _Optional[int] = ..., os: _Optional[str] = ..., architecture: _Optional[str] = ..., added_at_ms: _Optional[int] = ..., used_by: _Optional[_Iterable[str]] = ..., env: _Optional[_Iterable[str]] = ..., working_dir: _Optional[str] = ..., cmd: _Optional[_Iterable[str]] = ..., entrypoint: _Optional[_Iterable[str]] = ...) -> None: ...

class PullImageRequest(_message.Message):
    __slots__ = ("reference",)
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    reference: str
    def __init__(self, reference: _Optional[str] = ...) -> None: ...

class PullLayer(_message.Message):
    __slots__ = ("digest", "size", "cached")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    digest: str
    size: int
    cached: bool
    def __init__(self, digest: _Optional[str] = ..., size: _Optional[int] = ..., cached: bool = ...) -> None: ...

class PullStarted(_message.Message):
    __slots__ = ("reference", "digest", "layers", "total_bytes")
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    reference: str
    digest: str
    layers: _containers.RepeatedCompositeFieldContainer[PullLayer]
    total_bytes: int
    def __init__(self, reference: _Optional[str] = ..., digest: _Optional[str] = ..., layers: _Optional[_Iterable[_Union[PullLayer, _Mapping]]] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class PullProgress(_message.Message):
    __slots__ = ("layer_digest", "layer_done", "layer_size", "done_bytes", "total_bytes")
    LAYER_DIGEST_FIELD_NUMBER: _ClassVar[int]
    LAYER_DONE_FIELD_NUMBER: _ClassVar[int]
    LAYER_SIZE_FIELD_NUMBER: _ClassVar[int]
    DONE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    layer_digest: str
    layer_done: int
    layer_size: int
    done_bytes: int
    total_bytes: int
    def __init__(self, layer_digest: _Optional[str] = ..., layer_done: _Optional[int] = ..., layer_size: _Optional[int] = ..., done_bytes: _Optional[int] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class PullImageEvent(_message.Message):
    __slots__ = ("started", "progress", "layer_done", "unpacking", "done")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    LAYER_DONE_FIELD_NUMBER: _ClassVar[int]
    UNPACKING_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    started: PullStarted
    progress: PullProgress
    layer_done: str
    unpacking: bool
    done: ImageInfo
    def __init__(self, started: _Optional[_Union[PullStarted, _Mapping]] = ..., progress: _Optional[_Union[PullProgress, _Mapping]] = ..., layer_done: _Optional[str] = ..., unpacking: bool = ..., done: _Optional[_Union[ImageInfo, _Mapping]] = ...) -> None: ...

class ListImagesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListImagesResponse(_message.Message):
    __slots__ = ("images",)
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    images: _containers.RepeatedCompositeFieldContainer[ImageInfo]
    def __init__(self, images: _Optional[_Iterable[_Union[ImageInfo, _Mapping]]] = ...) -> None: ...

class InspectImageRequest(_message.Message):
    __slots__ = ("reference",)
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    reference: str
    def __init__(self, reference: _Optional[str] = ...) -> None: ...

class RemoveImageRequest(_message.Message):
    __slots__ = ("reference", "force")
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    reference: str
    force: bool
    def __init__(self, reference: _Optional[str] = ..., force: bool = ...) -> None: ...

class RemoveImageResponse(_message.Message):
    __slots__ = ("untagged", "deleted")
    UNTAGGED_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    untagged: _containers.RepeatedScalarFieldContainer[str]
    deleted: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, untagged: _Optional[_Iterable[str]] = ..., deleted: _Optional[_Iterable[str]] = ...) -> None: ...

class PruneImagesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PruneImagesResponse(_message.Message):
    __slots__ = ("deleted", "reclaimed_bytes")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    RECLAIMED_BYTES_FIELD_NUMBER: _ClassVar[int]
    deleted: _containers.RepeatedScalarFieldContainer[str]
    reclaimed_bytes: int
    def __init__(self, deleted: _Optional[_Iterable[str]] = ..., reclaimed_bytes: _Optional[int] = ...) -> None: ...

class ImportImageRequest(_message.Message):
    __slots__ = ("path", "reference")
    PATH_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    path: str
    reference: str
    def __init__(self, path: _Optional[str] = ..., reference: _Optional[str] = ...) -> None: ...

class CopyOutRequest(_message.Message):
    __slots__ = ("box_name", "path", "follow_symlinks")
    BOX_NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_SYMLINKS_FIELD_NUMBER: _ClassVar[int]
    box_name: str
    path: str
    follow_symlinks: bool
    def __init__(self, box_name: _Optional[str] = ..., path: _Optional[str] = ..., follow_symlinks: bool = ...) -> None: ...

class CopyOutResponse(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class CopyInStart(_message.Message):
    __slots__ = ("box_name", "path")
    BOX_NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    box_name: str
    path: str
    def __init__(self, box_name: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class CopyInRequest(_message.Message):
    __slots__ = ("start", "data")
    START_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    start: CopyInStart
    data: bytes
    def __init__(self, start: _Optional[_Union[CopyInStart, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class CopyInResponse(_message.Message):
    __slots__ = ("bytes",)
    BYTES_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    def __init__(self, bytes: _Optional[int] = ...) -> None: ...

class BoxStatsRequest(_message.Message):
    __slots__ = ("names", "stream", "interval_ms")
    NAMES_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    stream: bool
    interval_ms: int
    def __init__(self, names: _Optional[_Iterable[str]] = ..., stream: bool = ..., interval_ms: _Optional[int] = ...) -> None: ...

class BoxStat(_message.Message):
    __slots__ = ("id", "name", "cpu_usec", "cpu_percent", "memory_bytes", "memory_limit_bytes", "pids", "disk_bytes", "net_rx_bytes", "net_tx_bytes", "at_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CPU_USEC_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    NET_RX_BYTES_FIELD_NUMBER: _ClassVar[int]
    NET_TX_BYTES_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    cpu_usec: int
    cpu_percent: float
    memory_bytes: int
    memory_limit_bytes: int
    pids: int
    disk_bytes: int
    net_rx_bytes: int
    net_tx_bytes: int
    at_ms: int
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., cpu_usec: _Optional[int] = ..., cpu_percent: _Optional[float] = ..., memory_bytes: _Optional[int] = ..., memory_limit_bytes: _Optional[int] = ..., pids: _Optional[int] = ..., disk_bytes: _Optional[int] = ..., net_rx_bytes: _Optional[int] = ..., net_tx_bytes: _Optional[int] = ..., at_ms: _Optional[int] = ...) -> None: ...

class BoxStatsResponse(_message.Message):
    __slots__ = ("boxes",)
    BOXES_FIELD_NUMBER: _ClassVar[int]
    boxes: _containers.RepeatedCompositeFieldContainer[BoxStat]
    def __init__(self, boxes: _Optional[_Iterable[_Union[BoxStat, _Mapping]]] = ...) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ("name", "box_name", "created_at_ms", "size_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BOX_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    box_name: str
    created_at_ms: int
    size_bytes: int
    def __init__(self, name: _Optional[str] = ..., box_name: _Optional[str] = ..., created_at_ms: _Optional[int] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class CreateSnapshotRequest(_message.Message):
    __slots__ = ("box_name", "name")
    BOX_NAME_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    box_name: str
    name: str
    def __init__(self, box_name: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ("box_name",)
    BOX_NAME_FIELD_NUMBER: _ClassVar[int]
    box_name: str
    def __init__(self, box_name: _Optional[str] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ("snapshots",)
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[SnapshotInfo]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[SnapshotInfo, _Mapping]]] = ...) -> None: ...

class RestoreSnapshotRequest(_message.Message):
    __slots__ = ("box_name", "name")
    BOX_NAME_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    box_name: str
    name: str
    def __init__(self, box_name: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class RestoreSnapshotResponse(_message.Message):
    __slots__ = ("box",)
    BOX_FIELD_NUMBER: _ClassVar[int]
    box: BoxInfo
    def __init__(self, box: _Optional[_Union[BoxInfo, _Mapping]] = ...) -> None: ...

class RemoveSnapshotRequest(_message.Message):
    __slots__ = ("box_name", "name")
    BOX_NAME_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    box_name: str
    name: str
    def __init__(self, box_name: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class RemoveSnapshotResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CloneBoxRequest(_message.Message):
    __slots__ = ("source", "name")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    source: str
    name: str
    def __init__(self, source: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ExportBoxRequest(_message.Message):
    __slots__ = ("name", "path")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    name: str
    path: str
    def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ExportBoxResponse(_message.Message):
    __slots__ = ("size_bytes",)
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    size_bytes: int
    def __init__(self, size_bytes: _Optional[int] = ...) -> None: ...

class ImportBoxRequest(_message.Message):
    __slots__ = ("path", "name", "allow_net", "ports")
    PATH_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALLOW_NET_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    path: str
    name: str
    allow_net: _containers.RepeatedScalarFieldContainer[str]
    ports: _containers.RepeatedCompositeFieldContainer[PortMapping]
    def __init__(self, path: _Optional[str] = ..., name: _Optional[str] = ..., allow_net: _Optional[_Iterable[str]] = ..., ports: _Optional[_Iterable[_Union[PortMapping, _Mapping]]] = ...) -> None: ...
