import { BinaryReader, BinaryWriter } from "@bufbuild/protobuf/wire";
import { type CallOptions, type ChannelCredentials, Client, type ClientDuplexStream, type ClientOptions, type ClientReadableStream, type ClientUnaryCall, type ClientWritableStream, type handleBidiStreamingCall, type handleClientStreamingCall, type handleServerStreamingCall, type handleUnaryCall, type Metadata, type ServiceError, type UntypedServiceImplementation } from "@grpc/grpc-js";
export declare const protobufPackage = "boxd.v1";
export declare const protobufFileName = "boxd/v1/boxd.proto";
/**
 * The boxd API: one per-user daemon serving named, reusable boxes over gRPC
 * on a Unix socket. docs/api.md explains the design; this file is the one
 * source of truth for the wire.
 */
export declare enum BoxState {
    BOX_STATE_UNSPECIFIED = 0,
    BOX_STATE_CREATED = 1,
    BOX_STATE_STARTING = 2,
    BOX_STATE_RUNNING = 3,
    BOX_STATE_STOPPING = 4,
    BOX_STATE_STOPPED = 5,
    BOX_STATE_REMOVED = 6,
    BOX_STATE_FAILED = 7,
    UNRECOGNIZED = -1
}
/** What a create does when a box of its name exists already. */
export declare enum IfExists {
    /**
     * IF_EXISTS_REUSE - Reuse it as it is; what the request asked for differently is in the
     * reply's warnings (what harness-box-exec and the JSONL driver rely on).
     */
    IF_EXISTS_REUSE = 0,
    /**
     * IF_EXISTS_SAME_SPEC - Reuse it only when its whole spec is the request's (image, limits,
     * mounts, network, env, working directory, secrets, ports); otherwise
     * fail with ALREADY_EXISTS naming each difference, and change nothing.
     */
    IF_EXISTS_SAME_SPEC = 1,
    /**
     * IF_EXISTS_REPLACE - Remove it (stopping it first, with everything it wrote) and create a
     * new box from the request, as podman's `--replace` does.
     */
    IF_EXISTS_REPLACE = 2,
    /** IF_EXISTS_FAIL - Fail with ALREADY_EXISTS (a name that must be new, as docker's). */
    IF_EXISTS_FAIL = 3,
    UNRECOGNIZED = -1
}
export interface DescribeRequest {
}
export interface DescribeResponse {
    /** The API version, "boxd.v1". */
    protocol: string;
    /** The daemon's own version. */
    daemonVersion: string;
    pid: number;
    /** "namespace" or "boxlite". */
    engine: string;
    engineVersion: string;
    /** "microvm" or "namespace". */
    isolation: string;
    /** Optional features, e.g. "exec.tty", "exec.attach", "output.binary". */
    capabilities: string[];
    /** Why this engine was chosen and anything a user should know about it. */
    notes: string[];
    /**
     * Whether allow_net is enforced as a host filter and secrets are kept
     * out of boxes (false: empty allow_net means no network, anything else
     * means the host network).
     */
    networkFiltering: boolean;
    socket: string;
    home: string;
    /**
     * Where the engine runs boxes: empty for this host, "remote: URL" for a
     * BoxLite runtime served elsewhere (`boxd --boxlite-url`).
     */
    engineHost: string;
    /**
     * Why the engine cannot serve boxes right now, checked for this reply
     * (a remote server that does not answer, or refuses the API key);
     * empty when it can.
     */
    engineProblem: string;
}
export interface Mount {
    /** Absolute path on the host; it must exist. */
    hostPath: string;
    /** Absolute path inside the box. */
    guestPath: string;
    readOnly: boolean;
}
export interface BoxSpec {
    /**
     * A registry reference ("alpine:3.20") or an absolute path to a local OCI
     * image layout directory.
     */
    image: string;
    cpus?: number | undefined;
    memoryMib?: number | undefined;
    diskSizeGb?: number | undefined;
    mounts: Mount[];
    /**
     * Hosts the box may reach: names, "*.suffix" wildcards, IP addresses,
     * CIDRs. Empty: no network at all.
     */
    allowNet: string[];
    env: {
        [key: string]: string;
    };
    workingDir: string;
    /** Credentials the box uses by placeholder; the daemon keeps the values. */
    secrets: Secret[];
    /** Box ports published on the host while the box runs. */
    ports: PortMapping[];
    /**
     * Set: the owners of mounted host directories are box user keep_id.uid
     * (group keep_id.gid) instead of box root, and that user is the box's
     * default user, so a non-root box user writes in a mount as the host
     * user (podman's --userns=keep-id). Unset: a mount's owner is box root.
     */
    keepId: KeepId | undefined;
}
export interface BoxSpec_EnvEntry {
    key: string;
    value: string;
}
/** The box user that mounted directories' owners become (ids 1-65535). */
export interface KeepId {
    uid: number;
    gid: number;
}
/**
 * A box port reachable from the host: connections to host_ip:host_port are
 * relayed to box_port inside the box.
 */
export interface PortMapping {
    /** The host address to listen on; default "127.0.0.1". */
    hostIp: string;
    /** 0: any free port (the published one is in BoxInfo.ports). */
    hostPort: number;
    boxPort: number;
    /** "tcp" (the default; the only one today). */
    protocol: string;
}
/**
 * A credential kept out of the box. The box's environment holds
 * `name=placeholder`; the egress proxy puts `value` in place of the
 * placeholder in requests to `hosts` it can read (plain HTTP). `value` is
 * write-only: the daemon never returns it (replies carry it empty).
 */
export interface Secret {
    /** An environment variable name: [A-Za-z_][A-Za-z0-9_]*. */
    name: string;
    /** Where the value may go (allow-net entries, all of them in allow_net). */
    hosts: string[];
    /** Default: "BOXD_SECRET_PLACEHOLDER_<name>". */
    placeholder: string;
    value: string;
}
export interface BoxInfo {
    id: string;
    name: string;
    state: BoxState;
    image: string;
    /** Digest of the image manifest the box was made from. */
    imageDigest: string;
    /** Unix time in milliseconds. */
    createdAtMs: number;
    startedAtMs: number;
    isolation: string;
    engine: string;
    spec: BoxSpec | undefined;
    /** Execs running in the box now. */
    runningExecs: number;
    /** Why the box is FAILED, when it is. */
    error: string;
    /**
     * Bytes the box's own files take on boxd's disk (its writes over the
     * shared image, or its copy of the image), when the engine can tell.
     */
    diskBytes?: number | undefined;
    /** Ports published now (actual host ports), while the box runs. */
    ports: PortMapping[];
    /**
     * Where the engine runs the box: empty for this host, "remote: URL" for
     * a BoxLite runtime served elsewhere (`boxd --boxlite-url`).
     */
    engineHost: string;
}
export interface CreateBoxRequest {
    /** 1 to 64 characters of [A-Za-z0-9_.-], not starting with '.' or '-'. */
    name: string;
    spec: BoxSpec | undefined;
    /** What to do when a box of that name exists. */
    ifExists: IfExists;
}
export interface CreateBoxResponse {
    box: BoxInfo | undefined;
    /** False when a box of that name existed and is reused. */
    created: boolean;
    warnings: string[];
    elapsedMs: number;
    /** A box of that name existed and was removed first (IF_EXISTS_REPLACE). */
    replaced: boolean;
}
export interface StartBoxRequest {
    name: string;
}
export interface StartBoxResponse {
    box: BoxInfo | undefined;
    bootMs: number;
}
export interface StopBoxRequest {
    name: string;
    /** Kill at once instead of SIGTERM and a grace period. */
    force: boolean;
}
export interface StopBoxResponse {
    box: BoxInfo | undefined;
}
export interface UpdateBoxRequest {
    name: string;
    /** Unset: kept. */
    cpus?: number | undefined;
    memoryMib?: number | undefined;
    /** Set: the box's new allow-list (an empty list: no network); unset: kept. */
    allowNet: AllowNet | undefined;
}
export interface AllowNet {
    hosts: string[];
}
export interface UpdateBoxResponse {
    box: BoxInfo | undefined;
    /** What applies only from the box's next start, or is not enforced here. */
    warnings: string[];
}
export interface RemoveBoxRequest {
    name: string;
    /** Stop a running box first. */
    force: boolean;
}
export interface RemoveBoxResponse {
}
export interface ListBoxesRequest {
}
export interface ListBoxesResponse {
    boxes: BoxInfo[];
}
export interface InspectBoxRequest {
    name: string;
}
export interface WatchBoxesRequest {
    /**
     * > 0: first the events boxd kept (the last 1000 since it started) at or
     * after this Unix ms, then the live ones, with no gap and no duplicate.
     */
    sinceMs: number;
    /**
     * > 0: only events up to this Unix ms; the stream ends there (at once
     * after the kept ones when it is past).
     */
    untilMs: number;
    /**
     * First one event per box as it is now (`initial` set; `at_ms` the time
     * of its last change), then one with `synced` set and no box, then every
     * change after that list, with no gap and no duplicate: a UI can build
     * its list from this one stream. Not with `since_ms`.
     */
    initial: boolean;
}
export interface BoxEvent {
    boxId: string;
    name: string;
    state: BoxState;
    /** Time the transition took (boot time for RUNNING), when known. */
    elapsedMs: number;
    atMs: number;
    message: string;
    /**
     * One of the initial list (`WatchBoxesRequest.initial`): the box's state
     * when the watch began, not a change.
     */
    initial: boolean;
    /** The end of the initial list; this event names no box. */
    synced: boolean;
}
export interface TtySize {
    rows: number;
    cols: number;
}
export interface ExecStart {
    boxName: string;
    /**
     * Empty: the image's default, as docker runs it: its Entrypoint followed
     * by `args`, or by its Cmd when `args` is empty.
     */
    command: string;
    args: string[];
    /** Added to the box's environment. */
    env: {
        [key: string]: string;
    };
    /** Defaults to the box's working directory. */
    workingDir: string;
    /** Killed (SIGKILL) after this long; 0 means no limit. */
    timeoutMs: number;
    /** Give the command stdin (otherwise it reads /dev/null). */
    stdin: boolean;
    /**
     * Run on a pseudo-terminal of this size; stdout carries its output and
     * there is no stderr.
     */
    tty: boolean;
    ttySize: TtySize | undefined;
    /** Keep running when this stream goes away; attach later by id. */
    detach: boolean;
    /**
     * This client acknowledges the output it has taken (`ExecAck`) and
     * reattaches by offset after losing the daemon; output it has not
     * acknowledged is kept for it (at most 1 MiB ahead of its
     * acknowledgements: the command waits beyond that). Without it the
     * daemon acknowledges output as it hands it to the connection.
     */
    resumable: boolean;
    /**
     * `USER[:GROUP]` or `UID[:GID]` to run as, names resolved in the box's
     * /etc/passwd and /etc/group (docker's rules; HOME from the entry).
     * Empty: the image's User, else box root.
     */
    user: string;
}
export interface ExecStart_EnvEntry {
    key: string;
    value: string;
}
/**
 * Attaches to an exec by id. Output is replayed from the offsets (bytes of
 * each stream this client already has), as far back as it is kept.
 */
export interface ExecAttach {
    execId: string;
    stdoutOffset: number;
    stderrOffset: number;
    /** As `ExecStart.resumable`. */
    resumable: boolean;
}
/** Bytes of each output stream the client has taken (cumulative). */
export interface ExecAck {
    stdoutOffset: number;
    stderrOffset: number;
}
export interface Signal {
    /** A signal number (15) or name ("SIGTERM", "TERM"). */
    signal: string;
}
export interface ExecRequest {
    msg: {
        $case: "start";
        value: ExecStart;
    } | {
        $case: "attach";
        value: ExecAttach;
    } | {
        $case: "stdin";
        value: Buffer;
    } | //
    /** Close the command's stdin (EOF). */
    {
        $case: "closeStdin";
        value: boolean;
    } | {
        $case: "signal";
        value: Signal;
    } | {
        $case: "resize";
        value: TtySize;
    } | {
        $case: "ack";
        value: ExecAck;
    } | undefined;
}
export interface ExecStarted {
    execId: string;
    /** Time from the request to the process running. */
    launchMs: number;
    /**
     * Where the output that follows begins in each stream: 0 for a new
     * exec; on attach, the offsets asked for, or later ones when older
     * output is no longer kept.
     */
    stdoutOffset: number;
    stderrOffset: number;
    /**
     * Bytes of stdin the command has been given so far (a reattaching
     * client resends from here).
     */
    stdinOffset: number;
}
export interface ExecExit {
    /** Exit code, when the process exited. */
    code?: number | undefined;
    /** Signal number, when a signal killed it. */
    signal?: number | undefined;
    /**
     * Set when the engine could not run the command (`code` then follows the
     * shell convention: 126 cannot execute, 127 not found), or when the
     * command was killed because its box ended.
     */
    error: string;
    timedOut: boolean;
}
export interface ExecResponse {
    event: {
        $case: "started";
        value: ExecStarted;
    } | {
        $case: "stdout";
        value: Buffer;
    } | {
        $case: "stderr";
        value: Buffer;
    } | {
        $case: "exit";
        value: ExecExit;
    } | //
    /**
     * Bytes of stdin the command has been given so far, sent as stdin is
     * written. A client keeps at most 1 MiB of stdin in flight beyond it
     * (the daemon queues no more than that for it), and keeps those bytes
     * to resend after reattaching.
     */
    {
        $case: "stdinOffset";
        value: number;
    } | undefined;
}
export interface SendInputRequest {
    execId: string;
    data: Buffer;
    close: boolean;
}
export interface SendInputResponse {
}
export interface SignalExecRequest {
    execId: string;
    signal: Signal | undefined;
}
export interface SignalExecResponse {
}
export interface ResizeExecRequest {
    execId: string;
    size: TtySize | undefined;
}
export interface ResizeExecResponse {
}
export interface ListExecsRequest {
    /** Only execs in this box, when set. */
    boxName: string;
}
export interface ExecInfo {
    execId: string;
    boxName: string;
    command: string;
    args: string[];
    startedAtMs: number;
    tty: boolean;
    detach: boolean;
    attached: number;
    exited: boolean;
    /** How it ended, once it has. */
    exit: ExecExit | undefined;
}
export interface ListExecsResponse {
    execs: ExecInfo[];
}
export interface ImageInfo {
    /** The references that name this image (tags and digests), sorted. */
    references: string[];
    /** The platform manifest's digest ("sha256:…"): what a box records. */
    digest: string;
    /**
     * The digest the registry gave for the reference (an index for
     * multi-platform images), when pulled.
     */
    repoDigest: string;
    /** Compressed bytes of its layers, as stored. */
    size: number;
    layers: number;
    os: string;
    architecture: string;
    /** When it was pulled or imported, Unix ms. */
    addedAtMs: number;
    /** Names of the boxes created from it. */
    usedBy: string[];
    /** The image's default environment, working directory and command. */
    env: string[];
    workingDir: string;
    cmd: string[];
    entrypoint: string[];
}
export interface PullImageRequest {
    reference: string;
}
export interface PullLayer {
    digest: string;
    size: number;
    /** Already in the local blob store: nothing to download. */
    cached: boolean;
}
export interface PullStarted {
    reference: string;
    /** The platform manifest's digest. */
    digest: string;
    layers: PullLayer[];
    /** Bytes to download (layers not cached). */
    totalBytes: number;
}
export interface PullProgress {
    layerDigest: string;
    layerDone: number;
    layerSize: number;
    /** Over every layer of this pull. */
    doneBytes: number;
    totalBytes: number;
}
export interface PullImageEvent {
    event: {
        $case: "started";
        value: PullStarted;
    } | {
        $case: "progress";
        value: PullProgress;
    } | //
    /** A layer is verified and stored. */
    {
        $case: "layerDone";
        value: string;
    } | //
    /** Downloaded; now unpacking (namespace engine). */
    {
        $case: "unpacking";
        value: boolean;
    } | {
        $case: "done";
        value: ImageInfo;
    } | undefined;
}
export interface ListImagesRequest {
}
export interface ListImagesResponse {
    images: ImageInfo[];
}
export interface InspectImageRequest {
    reference: string;
}
export interface RemoveImageRequest {
    reference: string;
    /** Remove even when boxes were created from it (they keep their files). */
    force: boolean;
}
export interface RemoveImageResponse {
    untagged: string[];
    deleted: string[];
}
export interface PruneImagesRequest {
}
export interface PruneImagesResponse {
    deleted: string[];
    reclaimedBytes: number;
}
export interface ImportImageRequest {
    /** An OCI image layout directory or a `docker save` tarball (absolute). */
    path: string;
    /** The reference to give it; default: the layout's or tarball's own name. */
    reference: string;
}
export interface CopyOutRequest {
    boxName: string;
    /**
     * Absolute path inside the box; ending in "/." copies a directory's
     * contents rather than the directory.
     */
    path: string;
    /** Archive what symlinks point at instead of the links. */
    followSymlinks: boolean;
}
export interface CopyOutResponse {
    data: Buffer;
}
export interface CopyInStart {
    boxName: string;
    /** Absolute path inside the box. */
    path: string;
}
export interface CopyInRequest {
    msg: {
        $case: "start";
        value: CopyInStart;
    } | {
        $case: "data";
        value: Buffer;
    } | undefined;
}
export interface CopyInResponse {
    /** Archive bytes taken. */
    bytes: number;
}
export interface BoxStatsRequest {
    /** Running boxes of these names; empty: every running box. */
    names: string[];
    /** Keep sampling until the client goes away. */
    stream: boolean;
    /** Between samples when streaming; default 1000, at least 100. */
    intervalMs: number;
}
export interface BoxStat {
    id: string;
    name: string;
    /** CPU time used by the box's processes since it started. */
    cpuUsec: number;
    /** Over the last interval, 100 = one core. */
    cpuPercent: number;
    memoryBytes: number;
    /** The box's memory limit, when it has one. */
    memoryLimitBytes?: number | undefined;
    pids: number;
    /** Bytes the box's own files take (as BoxInfo.disk_bytes), when known. */
    diskBytes?: number | undefined;
    /**
     * Bytes to and from the network since the box started (on the
     * namespace engine: through its egress proxy and its published ports).
     */
    netRxBytes: number;
    netTxBytes: number;
    /** Unix ms of the sample. */
    atMs: number;
}
export interface BoxStatsResponse {
    boxes: BoxStat[];
}
export interface SnapshotInfo {
    name: string;
    boxName: string;
    createdAtMs: number;
    /** Bytes it takes on disk. */
    sizeBytes: number;
}
export interface CreateSnapshotRequest {
    boxName: string;
    /** As a box name. */
    name: string;
}
export interface ListSnapshotsRequest {
    boxName: string;
}
export interface ListSnapshotsResponse {
    snapshots: SnapshotInfo[];
}
export interface RestoreSnapshotRequest {
    boxName: string;
    name: string;
}
export interface RestoreSnapshotResponse {
    box: BoxInfo | undefined;
}
export interface RemoveSnapshotRequest {
    boxName: string;
    name: string;
}
export interface RemoveSnapshotResponse {
}
export interface CloneBoxRequest {
    source: string;
    /** The new box's name; it must not exist. */
    name: string;
}
export interface ExportBoxRequest {
    name: string;
    /** Absolute host path of the archive to write; it must not exist. */
    path: string;
}
export interface ExportBoxResponse {
    sizeBytes: number;
}
export interface ImportBoxRequest {
    /** Absolute host path of an archive ExportBox wrote. */
    path: string;
    /** The new box's name; it must not exist. */
    name: string;
    /**
     * What the new box may reach and what it publishes. An archive's own
     * allow-list and ports are never imported (whoever made it would choose
     * what this host lets a box reach, and where it listens): the importer
     * gives them here, or the box has none.
     */
    allowNet: string[];
    ports: PortMapping[];
}
export declare const DescribeRequest: MessageFns<DescribeRequest>;
export declare const DescribeResponse: MessageFns<DescribeResponse>;
export declare const Mount: MessageFns<Mount>;
export declare const BoxSpec: MessageFns<BoxSpec>;
export declare const BoxSpec_EnvEntry: MessageFns<BoxSpec_EnvEntry>;
export declare const KeepId: MessageFns<KeepId>;
export declare const PortMapping: MessageFns<PortMapping>;
export declare const Secret: MessageFns<Secret>;
export declare const BoxInfo: MessageFns<BoxInfo>;
export declare const CreateBoxRequest: MessageFns<CreateBoxRequest>;
export declare const CreateBoxResponse: MessageFns<CreateBoxResponse>;
export declare const StartBoxRequest: MessageFns<StartBoxRequest>;
export declare const StartBoxResponse: MessageFns<StartBoxResponse>;
export declare const StopBoxRequest: MessageFns<StopBoxRequest>;
export declare const StopBoxResponse: MessageFns<StopBoxResponse>;
export declare const UpdateBoxRequest: MessageFns<UpdateBoxRequest>;
export declare const AllowNet: MessageFns<AllowNet>;
export declare const UpdateBoxResponse: MessageFns<UpdateBoxResponse>;
export declare const RemoveBoxRequest: MessageFns<RemoveBoxRequest>;
export declare const RemoveBoxResponse: MessageFns<RemoveBoxResponse>;
export declare const ListBoxesRequest: MessageFns<ListBoxesRequest>;
export declare const ListBoxesResponse: MessageFns<ListBoxesResponse>;
export declare const InspectBoxRequest: MessageFns<InspectBoxRequest>;
export declare const WatchBoxesRequest: MessageFns<WatchBoxesRequest>;
export declare const BoxEvent: MessageFns<BoxEvent>;
export declare const TtySize: MessageFns<TtySize>;
export declare const ExecStart: MessageFns<ExecStart>;
export declare const ExecStart_EnvEntry: MessageFns<ExecStart_EnvEntry>;
export declare const ExecAttach: MessageFns<ExecAttach>;
export declare const ExecAck: MessageFns<ExecAck>;
export declare const Signal: MessageFns<Signal>;
export declare const ExecRequest: MessageFns<ExecRequest>;
export declare const ExecStarted: MessageFns<ExecStarted>;
export declare const ExecExit: MessageFns<ExecExit>;
export declare const ExecResponse: MessageFns<ExecResponse>;
export declare const SendInputRequest: MessageFns<SendInputRequest>;
export declare const SendInputResponse: MessageFns<SendInputResponse>;
export declare const SignalExecRequest: MessageFns<SignalExecRequest>;
export declare const SignalExecResponse: MessageFns<SignalExecResponse>;
export declare const ResizeExecRequest: MessageFns<ResizeExecRequest>;
export declare const ResizeExecResponse: MessageFns<ResizeExecResponse>;
export declare const ListExecsRequest: MessageFns<ListExecsRequest>;
export declare const ExecInfo: MessageFns<ExecInfo>;
export declare const ListExecsResponse: MessageFns<ListExecsResponse>;
export declare const ImageInfo: MessageFns<ImageInfo>;
export declare const PullImageRequest: MessageFns<PullImageRequest>;
export declare const PullLayer: MessageFns<PullLayer>;
export declare const PullStarted: MessageFns<PullStarted>;
export declare const PullProgress: MessageFns<PullProgress>;
export declare const PullImageEvent: MessageFns<PullImageEvent>;
export declare const ListImagesRequest: MessageFns<ListImagesRequest>;
export declare const ListImagesResponse: MessageFns<ListImagesResponse>;
export declare const InspectImageRequest: MessageFns<InspectImageRequest>;
export declare const RemoveImageRequest: MessageFns<RemoveImageRequest>;
export declare const RemoveImageResponse: MessageFns<RemoveImageResponse>;
export declare const PruneImagesRequest: MessageFns<PruneImagesRequest>;
export declare const PruneImagesResponse: MessageFns<PruneImagesResponse>;
export declare const ImportImageRequest: MessageFns<ImportImageRequest>;
export declare const CopyOutRequest: MessageFns<CopyOutRequest>;
export declare const CopyOutResponse: MessageFns<CopyOutResponse>;
export declare const CopyInStart: MessageFns<CopyInStart>;
export declare const CopyInRequest: MessageFns<CopyInRequest>;
export declare const CopyInResponse: MessageFns<CopyInResponse>;
export declare const BoxStatsRequest: MessageFns<BoxStatsRequest>;
export declare const BoxStat: MessageFns<BoxStat>;
export declare const BoxStatsResponse: MessageFns<BoxStatsResponse>;
export declare const SnapshotInfo: MessageFns<SnapshotInfo>;
export declare const CreateSnapshotRequest: MessageFns<CreateSnapshotRequest>;
export declare const ListSnapshotsRequest: MessageFns<ListSnapshotsRequest>;
export declare const ListSnapshotsResponse: MessageFns<ListSnapshotsResponse>;
export declare const RestoreSnapshotRequest: MessageFns<RestoreSnapshotRequest>;
export declare const RestoreSnapshotResponse: MessageFns<RestoreSnapshotResponse>;
export declare const RemoveSnapshotRequest: MessageFns<RemoveSnapshotRequest>;
export declare const RemoveSnapshotResponse: MessageFns<RemoveSnapshotResponse>;
export declare const CloneBoxRequest: MessageFns<CloneBoxRequest>;
export declare const ExportBoxRequest: MessageFns<ExportBoxRequest>;
export declare const ExportBoxResponse: MessageFns<ExportBoxResponse>;
export declare const ImportBoxRequest: MessageFns<ImportBoxRequest>;
export type BoxdService = typeof BoxdService;
export declare const BoxdService: {
    /** What this daemon is: versions, pid, engine, isolation, capabilities. */
    readonly describe: {
        readonly path: "/boxd.v1.Boxd/Describe";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: DescribeRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => DescribeRequest;
        readonly responseSerialize: (value: DescribeResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => DescribeResponse;
    };
    /**
     * Get-or-create by name. An existing box is reused as it is; options that
     * differ from the request are reported in `warnings`, never applied.
     */
    readonly createBox: {
        readonly path: "/boxd.v1.Boxd/CreateBox";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: CreateBoxRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => CreateBoxRequest;
        readonly responseSerialize: (value: CreateBoxResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => CreateBoxResponse;
    };
    /** Start a box. Starting a running box is a no-op with boot_ms = 0. */
    readonly startBox: {
        readonly path: "/boxd.v1.Boxd/StartBox";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: StartBoxRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => StartBoxRequest;
        readonly responseSerialize: (value: StartBoxResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => StartBoxResponse;
    };
    /** Stop a box: every process in it ends. Its files stay. */
    readonly stopBox: {
        readonly path: "/boxd.v1.Boxd/StopBox";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: StopBoxRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => StopBoxRequest;
        readonly responseSerialize: (value: StopBoxResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => StopBoxResponse;
    };
    /**
     * Change an existing box's limits or network allow-list (docker update).
     * Limits apply at once to a running box where the engine can (the
     * namespace engine's cgroups); what cannot apply before the next start
     * is said in `warnings`.
     */
    readonly updateBox: {
        readonly path: "/boxd.v1.Boxd/UpdateBox";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: UpdateBoxRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => UpdateBoxRequest;
        readonly responseSerialize: (value: UpdateBoxResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => UpdateBoxResponse;
    };
    /** Remove a box and its writable layer. A running box needs `force`. */
    readonly removeBox: {
        readonly path: "/boxd.v1.Boxd/RemoveBox";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: RemoveBoxRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => RemoveBoxRequest;
        readonly responseSerialize: (value: RemoveBoxResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => RemoveBoxResponse;
    };
    readonly listBoxes: {
        readonly path: "/boxd.v1.Boxd/ListBoxes";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: ListBoxesRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => ListBoxesRequest;
        readonly responseSerialize: (value: ListBoxesResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => ListBoxesResponse;
    };
    readonly inspectBox: {
        readonly path: "/boxd.v1.Boxd/InspectBox";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: InspectBoxRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => InspectBoxRequest;
        readonly responseSerialize: (value: BoxInfo) => Buffer;
        readonly responseDeserialize: (value: Buffer) => BoxInfo;
    };
    /**
     * Box state changes, as they happen, until the client goes away; with
     * `initial`, first every box as it is now.
     */
    readonly watchBoxes: {
        readonly path: "/boxd.v1.Boxd/WatchBoxes";
        readonly requestStream: false;
        readonly responseStream: true;
        readonly requestSerialize: (value: WatchBoxesRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => WatchBoxesRequest;
        readonly responseSerialize: (value: BoxEvent) => Buffer;
        readonly responseDeserialize: (value: Buffer) => BoxEvent;
    };
    /**
     * Run a command in a box, or attach to one that runs.
     *
     * The first request is `start` or `attach`; later requests carry stdin,
     * stdin EOF, signals and TTY sizes. The first response is `started`; then
     * stdout and stderr chunks; then exactly one `exit`, after every byte of
     * output. When the stream that started a non-detached exec goes away, the
     * exec is killed.
     */
    readonly exec: {
        readonly path: "/boxd.v1.Boxd/Exec";
        readonly requestStream: true;
        readonly responseStream: true;
        readonly requestSerialize: (value: ExecRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => ExecRequest;
        readonly responseSerialize: (value: ExecResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => ExecResponse;
    };
    /** Address a running exec by id from any client. */
    readonly sendInput: {
        readonly path: "/boxd.v1.Boxd/SendInput";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: SendInputRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => SendInputRequest;
        readonly responseSerialize: (value: SendInputResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => SendInputResponse;
    };
    readonly signalExec: {
        readonly path: "/boxd.v1.Boxd/SignalExec";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: SignalExecRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => SignalExecRequest;
        readonly responseSerialize: (value: SignalExecResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => SignalExecResponse;
    };
    readonly resizeExec: {
        readonly path: "/boxd.v1.Boxd/ResizeExec";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: ResizeExecRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => ResizeExecRequest;
        readonly responseSerialize: (value: ResizeExecResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => ResizeExecResponse;
    };
    readonly listExecs: {
        readonly path: "/boxd.v1.Boxd/ListExecs";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: ListExecsRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => ListExecsRequest;
        readonly responseSerialize: (value: ListExecsResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => ListExecsResponse;
    };
    /**
     * Images. A reference is a registry reference (`registry/name:tag`,
     * `name@sha256:…`; no registry means docker.io) or, for Import, the tag
     * to give a local layout. Pulling streams progress and ends with `done`;
     * a pull of an image already present still resolves the reference against
     * the registry (CreateBox does not: it pulls only what is missing).
     */
    readonly pullImage: {
        readonly path: "/boxd.v1.Boxd/PullImage";
        readonly requestStream: false;
        readonly responseStream: true;
        readonly requestSerialize: (value: PullImageRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => PullImageRequest;
        readonly responseSerialize: (value: PullImageEvent) => Buffer;
        readonly responseDeserialize: (value: Buffer) => PullImageEvent;
    };
    readonly listImages: {
        readonly path: "/boxd.v1.Boxd/ListImages";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: ListImagesRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => ListImagesRequest;
        readonly responseSerialize: (value: ListImagesResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => ListImagesResponse;
    };
    readonly inspectImage: {
        readonly path: "/boxd.v1.Boxd/InspectImage";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: InspectImageRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => InspectImageRequest;
        readonly responseSerialize: (value: ImageInfo) => Buffer;
        readonly responseDeserialize: (value: Buffer) => ImageInfo;
    };
    readonly removeImage: {
        readonly path: "/boxd.v1.Boxd/RemoveImage";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: RemoveImageRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => RemoveImageRequest;
        readonly responseSerialize: (value: RemoveImageResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => RemoveImageResponse;
    };
    /**
     * Removes every image no reference names and no box uses, and every blob
     * no remaining image needs.
     */
    readonly pruneImages: {
        readonly path: "/boxd.v1.Boxd/PruneImages";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: PruneImagesRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => PruneImagesRequest;
        readonly responseSerialize: (value: PruneImagesResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => PruneImagesResponse;
    };
    /** Imports an OCI image layout directory or a `docker save` tarball. */
    readonly importImage: {
        readonly path: "/boxd.v1.Boxd/ImportImage";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: ImportImageRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => ImportImageRequest;
        readonly responseSerialize: (value: ImageInfo) => Buffer;
        readonly responseDeserialize: (value: Buffer) => ImageInfo;
    };
    /**
     * Files, as tar streams of one file or directory tree (modes, symlinks
     * and times travel). Paths are the box's: they resolve inside the box, so
     * a symlink in the box never aims a copy at the host. The box must run.
     *
     * CopyOut: `path` as an archive whose one top-level entry is named after
     * `path`'s last component (`docker cp` semantics).
     */
    readonly copyOut: {
        readonly path: "/boxd.v1.Boxd/CopyOut";
        readonly requestStream: false;
        readonly responseStream: true;
        readonly requestSerialize: (value: CopyOutRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => CopyOutRequest;
        readonly responseSerialize: (value: CopyOutResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => CopyOutResponse;
    };
    /**
     * CopyIn: the first request is `start`, the rest `data`, the archive's
     * bytes in order. When `start.path` is an existing directory the
     * archive's entries land in it; otherwise its one top-level entry
     * becomes `path` (whose parent must exist).
     */
    readonly copyIn: {
        readonly path: "/boxd.v1.Boxd/CopyIn";
        readonly requestStream: true;
        readonly responseStream: false;
        readonly requestSerialize: (value: CopyInRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => CopyInRequest;
        readonly responseSerialize: (value: CopyInResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => CopyInResponse;
    };
    /**
     * Resource use of running boxes (all of them, or those named): one
     * sample, or one every `interval_ms` while the client listens.
     */
    readonly boxStats: {
        readonly path: "/boxd.v1.Boxd/BoxStats";
        readonly requestStream: false;
        readonly responseStream: true;
        readonly requestSerialize: (value: BoxStatsRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => BoxStatsRequest;
        readonly responseSerialize: (value: BoxStatsResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => BoxStatsResponse;
    };
    /** Snapshots of a box's files (its writes over its image), by name. */
    readonly createSnapshot: {
        readonly path: "/boxd.v1.Boxd/CreateSnapshot";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: CreateSnapshotRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => CreateSnapshotRequest;
        readonly responseSerialize: (value: SnapshotInfo) => Buffer;
        readonly responseDeserialize: (value: Buffer) => SnapshotInfo;
    };
    readonly listSnapshots: {
        readonly path: "/boxd.v1.Boxd/ListSnapshots";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: ListSnapshotsRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => ListSnapshotsRequest;
        readonly responseSerialize: (value: ListSnapshotsResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => ListSnapshotsResponse;
    };
    /**
     * Puts the box's files back as they were at the snapshot (the box must be
     * stopped); the snapshot stays.
     */
    readonly restoreSnapshot: {
        readonly path: "/boxd.v1.Boxd/RestoreSnapshot";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: RestoreSnapshotRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => RestoreSnapshotRequest;
        readonly responseSerialize: (value: RestoreSnapshotResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => RestoreSnapshotResponse;
    };
    readonly removeSnapshot: {
        readonly path: "/boxd.v1.Boxd/RemoveSnapshot";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: RemoveSnapshotRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => RemoveSnapshotRequest;
        readonly responseSerialize: (value: RemoveSnapshotResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => RemoveSnapshotResponse;
    };
    /**
     * A new box with the source's spec and a copy of its files (running or
     * not); created, not started.
     */
    readonly cloneBox: {
        readonly path: "/boxd.v1.Boxd/CloneBox";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: CloneBoxRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => CloneBoxRequest;
        readonly responseSerialize: (value: CreateBoxResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => CreateBoxResponse;
    };
    /**
     * Writes a box archive (its spec, its image reference and its writes) to
     * a file; ImportBox makes a new box from one. Archives are the engine's
     * own format.
     */
    readonly exportBox: {
        readonly path: "/boxd.v1.Boxd/ExportBox";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: ExportBoxRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => ExportBoxRequest;
        readonly responseSerialize: (value: ExportBoxResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => ExportBoxResponse;
    };
    readonly importBox: {
        readonly path: "/boxd.v1.Boxd/ImportBox";
        readonly requestStream: false;
        readonly responseStream: false;
        readonly requestSerialize: (value: ImportBoxRequest) => Buffer;
        readonly requestDeserialize: (value: Buffer) => ImportBoxRequest;
        readonly responseSerialize: (value: CreateBoxResponse) => Buffer;
        readonly responseDeserialize: (value: Buffer) => CreateBoxResponse;
    };
};
export interface BoxdServer extends UntypedServiceImplementation {
    /** What this daemon is: versions, pid, engine, isolation, capabilities. */
    describe: handleUnaryCall<DescribeRequest, DescribeResponse>;
    /**
     * Get-or-create by name. An existing box is reused as it is; options that
     * differ from the request are reported in `warnings`, never applied.
     */
    createBox: handleUnaryCall<CreateBoxRequest, CreateBoxResponse>;
    /** Start a box. Starting a running box is a no-op with boot_ms = 0. */
    startBox: handleUnaryCall<StartBoxRequest, StartBoxResponse>;
    /** Stop a box: every process in it ends. Its files stay. */
    stopBox: handleUnaryCall<StopBoxRequest, StopBoxResponse>;
    /**
     * Change an existing box's limits or network allow-list (docker update).
     * Limits apply at once to a running box where the engine can (the
     * namespace engine's cgroups); what cannot apply before the next start
     * is said in `warnings`.
     */
    updateBox: handleUnaryCall<UpdateBoxRequest, UpdateBoxResponse>;
    /** Remove a box and its writable layer. A running box needs `force`. */
    removeBox: handleUnaryCall<RemoveBoxRequest, RemoveBoxResponse>;
    listBoxes: handleUnaryCall<ListBoxesRequest, ListBoxesResponse>;
    inspectBox: handleUnaryCall<InspectBoxRequest, BoxInfo>;
    /**
     * Box state changes, as they happen, until the client goes away; with
     * `initial`, first every box as it is now.
     */
    watchBoxes: handleServerStreamingCall<WatchBoxesRequest, BoxEvent>;
    /**
     * Run a command in a box, or attach to one that runs.
     *
     * The first request is `start` or `attach`; later requests carry stdin,
     * stdin EOF, signals and TTY sizes. The first response is `started`; then
     * stdout and stderr chunks; then exactly one `exit`, after every byte of
     * output. When the stream that started a non-detached exec goes away, the
     * exec is killed.
     */
    exec: handleBidiStreamingCall<ExecRequest, ExecResponse>;
    /** Address a running exec by id from any client. */
    sendInput: handleUnaryCall<SendInputRequest, SendInputResponse>;
    signalExec: handleUnaryCall<SignalExecRequest, SignalExecResponse>;
    resizeExec: handleUnaryCall<ResizeExecRequest, ResizeExecResponse>;
    listExecs: handleUnaryCall<ListExecsRequest, ListExecsResponse>;
    /**
     * Images. A reference is a registry reference (`registry/name:tag`,
     * `name@sha256:…`; no registry means docker.io) or, for Import, the tag
     * to give a local layout. Pulling streams progress and ends with `done`;
     * a pull of an image already present still resolves the reference against
     * the registry (CreateBox does not: it pulls only what is missing).
     */
    pullImage: handleServerStreamingCall<PullImageRequest, PullImageEvent>;
    listImages: handleUnaryCall<ListImagesRequest, ListImagesResponse>;
    inspectImage: handleUnaryCall<InspectImageRequest, ImageInfo>;
    removeImage: handleUnaryCall<RemoveImageRequest, RemoveImageResponse>;
    /**
     * Removes every image no reference names and no box uses, and every blob
     * no remaining image needs.
     */
    pruneImages: handleUnaryCall<PruneImagesRequest, PruneImagesResponse>;
    /** Imports an OCI image layout directory or a `docker save` tarball. */
    importImage: handleUnaryCall<ImportImageRequest, ImageInfo>;
    /**
     * Files, as tar streams of one file or directory tree (modes, symlinks
     * and times travel). Paths are the box's: they resolve inside the box, so
     * a symlink in the box never aims a copy at the host. The box must run.
     *
     * CopyOut: `path` as an archive whose one top-level entry is named after
     * `path`'s last component (`docker cp` semantics).
     */
    copyOut: handleServerStreamingCall<CopyOutRequest, CopyOutResponse>;
    /**
     * CopyIn: the first request is `start`, the rest `data`, the archive's
     * bytes in order. When `start.path` is an existing directory the
     * archive's entries land in it; otherwise its one top-level entry
     * becomes `path` (whose parent must exist).
     */
    copyIn: handleClientStreamingCall<CopyInRequest, CopyInResponse>;
    /**
     * Resource use of running boxes (all of them, or those named): one
     * sample, or one every `interval_ms` while the client listens.
     */
    boxStats: handleServerStreamingCall<BoxStatsRequest, BoxStatsResponse>;
    /** Snapshots of a box's files (its writes over its image), by name. */
    createSnapshot: handleUnaryCall<CreateSnapshotRequest, SnapshotInfo>;
    listSnapshots: handleUnaryCall<ListSnapshotsRequest, ListSnapshotsResponse>;
    /**
     * Puts the box's files back as they were at the snapshot (the box must be
     * stopped); the snapshot stays.
     */
    restoreSnapshot: handleUnaryCall<RestoreSnapshotRequest, RestoreSnapshotResponse>;
    removeSnapshot: handleUnaryCall<RemoveSnapshotRequest, RemoveSnapshotResponse>;
    /**
     * A new box with the source's spec and a copy of its files (running or
     * not); created, not started.
     */
    cloneBox: handleUnaryCall<CloneBoxRequest, CreateBoxResponse>;
    /**
     * Writes a box archive (its spec, its image reference and its writes) to
     * a file; ImportBox makes a new box from one. Archives are the engine's
     * own format.
     */
    exportBox: handleUnaryCall<ExportBoxRequest, ExportBoxResponse>;
    importBox: handleUnaryCall<ImportBoxRequest, CreateBoxResponse>;
}
export interface BoxdClient extends Client {
    /** What this daemon is: versions, pid, engine, isolation, capabilities. */
    describe(request: DescribeRequest, callback: (error: ServiceError | null, response: DescribeResponse) => void): ClientUnaryCall;
    describe(request: DescribeRequest, metadata: Metadata, callback: (error: ServiceError | null, response: DescribeResponse) => void): ClientUnaryCall;
    describe(request: DescribeRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: DescribeResponse) => void): ClientUnaryCall;
    /**
     * Get-or-create by name. An existing box is reused as it is; options that
     * differ from the request are reported in `warnings`, never applied.
     */
    createBox(request: CreateBoxRequest, callback: (error: ServiceError | null, response: CreateBoxResponse) => void): ClientUnaryCall;
    createBox(request: CreateBoxRequest, metadata: Metadata, callback: (error: ServiceError | null, response: CreateBoxResponse) => void): ClientUnaryCall;
    createBox(request: CreateBoxRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: CreateBoxResponse) => void): ClientUnaryCall;
    /** Start a box. Starting a running box is a no-op with boot_ms = 0. */
    startBox(request: StartBoxRequest, callback: (error: ServiceError | null, response: StartBoxResponse) => void): ClientUnaryCall;
    startBox(request: StartBoxRequest, metadata: Metadata, callback: (error: ServiceError | null, response: StartBoxResponse) => void): ClientUnaryCall;
    startBox(request: StartBoxRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: StartBoxResponse) => void): ClientUnaryCall;
    /** Stop a box: every process in it ends. Its files stay. */
    stopBox(request: StopBoxRequest, callback: (error: ServiceError | null, response: StopBoxResponse) => void): ClientUnaryCall;
    stopBox(request: StopBoxRequest, metadata: Metadata, callback: (error: ServiceError | null, response: StopBoxResponse) => void): ClientUnaryCall;
    stopBox(request: StopBoxRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: StopBoxResponse) => void): ClientUnaryCall;
    /**
     * Change an existing box's limits or network allow-list (docker update).
     * Limits apply at once to a running box where the engine can (the
     * namespace engine's cgroups); what cannot apply before the next start
     * is said in `warnings`.
     */
    updateBox(request: UpdateBoxRequest, callback: (error: ServiceError | null, response: UpdateBoxResponse) => void): ClientUnaryCall;
    updateBox(request: UpdateBoxRequest, metadata: Metadata, callback: (error: ServiceError | null, response: UpdateBoxResponse) => void): ClientUnaryCall;
    updateBox(request: UpdateBoxRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: UpdateBoxResponse) => void): ClientUnaryCall;
    /** Remove a box and its writable layer. A running box needs `force`. */
    removeBox(request: RemoveBoxRequest, callback: (error: ServiceError | null, response: RemoveBoxResponse) => void): ClientUnaryCall;
    removeBox(request: RemoveBoxRequest, metadata: Metadata, callback: (error: ServiceError | null, response: RemoveBoxResponse) => void): ClientUnaryCall;
    removeBox(request: RemoveBoxRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: RemoveBoxResponse) => void): ClientUnaryCall;
    listBoxes(request: ListBoxesRequest, callback: (error: ServiceError | null, response: ListBoxesResponse) => void): ClientUnaryCall;
    listBoxes(request: ListBoxesRequest, metadata: Metadata, callback: (error: ServiceError | null, response: ListBoxesResponse) => void): ClientUnaryCall;
    listBoxes(request: ListBoxesRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: ListBoxesResponse) => void): ClientUnaryCall;
    inspectBox(request: InspectBoxRequest, callback: (error: ServiceError | null, response: BoxInfo) => void): ClientUnaryCall;
    inspectBox(request: InspectBoxRequest, metadata: Metadata, callback: (error: ServiceError | null, response: BoxInfo) => void): ClientUnaryCall;
    inspectBox(request: InspectBoxRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: BoxInfo) => void): ClientUnaryCall;
    /**
     * Box state changes, as they happen, until the client goes away; with
     * `initial`, first every box as it is now.
     */
    watchBoxes(request: WatchBoxesRequest, options?: Partial<CallOptions>): ClientReadableStream<BoxEvent>;
    watchBoxes(request: WatchBoxesRequest, metadata?: Metadata, options?: Partial<CallOptions>): ClientReadableStream<BoxEvent>;
    /**
     * Run a command in a box, or attach to one that runs.
     *
     * The first request is `start` or `attach`; later requests carry stdin,
     * stdin EOF, signals and TTY sizes. The first response is `started`; then
     * stdout and stderr chunks; then exactly one `exit`, after every byte of
     * output. When the stream that started a non-detached exec goes away, the
     * exec is killed.
     */
    exec(): ClientDuplexStream<ExecRequest, ExecResponse>;
    exec(options: Partial<CallOptions>): ClientDuplexStream<ExecRequest, ExecResponse>;
    exec(metadata: Metadata, options?: Partial<CallOptions>): ClientDuplexStream<ExecRequest, ExecResponse>;
    /** Address a running exec by id from any client. */
    sendInput(request: SendInputRequest, callback: (error: ServiceError | null, response: SendInputResponse) => void): ClientUnaryCall;
    sendInput(request: SendInputRequest, metadata: Metadata, callback: (error: ServiceError | null, response: SendInputResponse) => void): ClientUnaryCall;
    sendInput(request: SendInputRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: SendInputResponse) => void): ClientUnaryCall;
    signalExec(request: SignalExecRequest, callback: (error: ServiceError | null, response: SignalExecResponse) => void): ClientUnaryCall;
    signalExec(request: SignalExecRequest, metadata: Metadata, callback: (error: ServiceError | null, response: SignalExecResponse) => void): ClientUnaryCall;
    signalExec(request: SignalExecRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: SignalExecResponse) => void): ClientUnaryCall;
    resizeExec(request: ResizeExecRequest, callback: (error: ServiceError | null, response: ResizeExecResponse) => void): ClientUnaryCall;
    resizeExec(request: ResizeExecRequest, metadata: Metadata, callback: (error: ServiceError | null, response: ResizeExecResponse) => void): ClientUnaryCall;
    resizeExec(request: ResizeExecRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: ResizeExecResponse) => void): ClientUnaryCall;
    listExecs(request: ListExecsRequest, callback: (error: ServiceError | null, response: ListExecsResponse) => void): ClientUnaryCall;
    listExecs(request: ListExecsRequest, metadata: Metadata, callback: (error: ServiceError | null, response: ListExecsResponse) => void): ClientUnaryCall;
    listExecs(request: ListExecsRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: ListExecsResponse) => void): ClientUnaryCall;
    /**
     * Images. A reference is a registry reference (`registry/name:tag`,
     * `name@sha256:…`; no registry means docker.io) or, for Import, the tag
     * to give a local layout. Pulling streams progress and ends with `done`;
     * a pull of an image already present still resolves the reference against
     * the registry (CreateBox does not: it pulls only what is missing).
     */
    pullImage(request: PullImageRequest, options?: Partial<CallOptions>): ClientReadableStream<PullImageEvent>;
    pullImage(request: PullImageRequest, metadata?: Metadata, options?: Partial<CallOptions>): ClientReadableStream<PullImageEvent>;
    listImages(request: ListImagesRequest, callback: (error: ServiceError | null, response: ListImagesResponse) => void): ClientUnaryCall;
    listImages(request: ListImagesRequest, metadata: Metadata, callback: (error: ServiceError | null, response: ListImagesResponse) => void): ClientUnaryCall;
    listImages(request: ListImagesRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: ListImagesResponse) => void): ClientUnaryCall;
    inspectImage(request: InspectImageRequest, callback: (error: ServiceError | null, response: ImageInfo) => void): ClientUnaryCall;
    inspectImage(request: InspectImageRequest, metadata: Metadata, callback: (error: ServiceError | null, response: ImageInfo) => void): ClientUnaryCall;
    inspectImage(request: InspectImageRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: ImageInfo) => void): ClientUnaryCall;
    removeImage(request: RemoveImageRequest, callback: (error: ServiceError | null, response: RemoveImageResponse) => void): ClientUnaryCall;
    removeImage(request: RemoveImageRequest, metadata: Metadata, callback: (error: ServiceError | null, response: RemoveImageResponse) => void): ClientUnaryCall;
    removeImage(request: RemoveImageRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: RemoveImageResponse) => void): ClientUnaryCall;
    /**
     * Removes every image no reference names and no box uses, and every blob
     * no remaining image needs.
     */
    pruneImages(request: PruneImagesRequest, callback: (error: ServiceError | null, response: PruneImagesResponse) => void): ClientUnaryCall;
    pruneImages(request: PruneImagesRequest, metadata: Metadata, callback: (error: ServiceError | null, response: PruneImagesResponse) => void): ClientUnaryCall;
    pruneImages(request: PruneImagesRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: PruneImagesResponse) => void): ClientUnaryCall;
    /** Imports an OCI image layout directory or a `docker save` tarball. */
    importImage(request: ImportImageRequest, callback: (error: ServiceError | null, response: ImageInfo) => void): ClientUnaryCall;
    importImage(request: ImportImageRequest, metadata: Metadata, callback: (error: ServiceError | null, response: ImageInfo) => void): ClientUnaryCall;
    importImage(request: ImportImageRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: ImageInfo) => void): ClientUnaryCall;
    /**
     * Files, as tar streams of one file or directory tree (modes, symlinks
     * and times travel). Paths are the box's: they resolve inside the box, so
     * a symlink in the box never aims a copy at the host. The box must run.
     *
     * CopyOut: `path` as an archive whose one top-level entry is named after
     * `path`'s last component (`docker cp` semantics).
     */
    copyOut(request: CopyOutRequest, options?: Partial<CallOptions>): ClientReadableStream<CopyOutResponse>;
    copyOut(request: CopyOutRequest, metadata?: Metadata, options?: Partial<CallOptions>): ClientReadableStream<CopyOutResponse>;
    /**
     * CopyIn: the first request is `start`, the rest `data`, the archive's
     * bytes in order. When `start.path` is an existing directory the
     * archive's entries land in it; otherwise its one top-level entry
     * becomes `path` (whose parent must exist).
     */
    copyIn(callback: (error: ServiceError | null, response: CopyInResponse) => void): ClientWritableStream<CopyInRequest>;
    copyIn(metadata: Metadata, callback: (error: ServiceError | null, response: CopyInResponse) => void): ClientWritableStream<CopyInRequest>;
    copyIn(options: Partial<CallOptions>, callback: (error: ServiceError | null, response: CopyInResponse) => void): ClientWritableStream<CopyInRequest>;
    copyIn(metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: CopyInResponse) => void): ClientWritableStream<CopyInRequest>;
    /**
     * Resource use of running boxes (all of them, or those named): one
     * sample, or one every `interval_ms` while the client listens.
     */
    boxStats(request: BoxStatsRequest, options?: Partial<CallOptions>): ClientReadableStream<BoxStatsResponse>;
    boxStats(request: BoxStatsRequest, metadata?: Metadata, options?: Partial<CallOptions>): ClientReadableStream<BoxStatsResponse>;
    /** Snapshots of a box's files (its writes over its image), by name. */
    createSnapshot(request: CreateSnapshotRequest, callback: (error: ServiceError | null, response: SnapshotInfo) => void): ClientUnaryCall;
    createSnapshot(request: CreateSnapshotRequest, metadata: Metadata, callback: (error: ServiceError | null, response: SnapshotInfo) => void): ClientUnaryCall;
    createSnapshot(request: CreateSnapshotRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: SnapshotInfo) => void): ClientUnaryCall;
    listSnapshots(request: ListSnapshotsRequest, callback: (error: ServiceError | null, response: ListSnapshotsResponse) => void): ClientUnaryCall;
    listSnapshots(request: ListSnapshotsRequest, metadata: Metadata, callback: (error: ServiceError | null, response: ListSnapshotsResponse) => void): ClientUnaryCall;
    listSnapshots(request: ListSnapshotsRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: ListSnapshotsResponse) => void): ClientUnaryCall;
    /**
     * Puts the box's files back as they were at the snapshot (the box must be
     * stopped); the snapshot stays.
     */
    restoreSnapshot(request: RestoreSnapshotRequest, callback: (error: ServiceError | null, response: RestoreSnapshotResponse) => void): ClientUnaryCall;
    restoreSnapshot(request: RestoreSnapshotRequest, metadata: Metadata, callback: (error: ServiceError | null, response: RestoreSnapshotResponse) => void): ClientUnaryCall;
    restoreSnapshot(request: RestoreSnapshotRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: RestoreSnapshotResponse) => void): ClientUnaryCall;
    removeSnapshot(request: RemoveSnapshotRequest, callback: (error: ServiceError | null, response: RemoveSnapshotResponse) => void): ClientUnaryCall;
    removeSnapshot(request: RemoveSnapshotRequest, metadata: Metadata, callback: (error: ServiceError | null, response: RemoveSnapshotResponse) => void): ClientUnaryCall;
    removeSnapshot(request: RemoveSnapshotRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: RemoveSnapshotResponse) => void): ClientUnaryCall;
    /**
     * A new box with the source's spec and a copy of its files (running or
     * not); created, not started.
     */
    cloneBox(request: CloneBoxRequest, callback: (error: ServiceError | null, response: CreateBoxResponse) => void): ClientUnaryCall;
    cloneBox(request: CloneBoxRequest, metadata: Metadata, callback: (error: ServiceError | null, response: CreateBoxResponse) => void): ClientUnaryCall;
    cloneBox(request: CloneBoxRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: CreateBoxResponse) => void): ClientUnaryCall;
    /**
     * Writes a box archive (its spec, its image reference and its writes) to
     * a file; ImportBox makes a new box from one. Archives are the engine's
     * own format.
     */
    exportBox(request: ExportBoxRequest, callback: (error: ServiceError | null, response: ExportBoxResponse) => void): ClientUnaryCall;
    exportBox(request: ExportBoxRequest, metadata: Metadata, callback: (error: ServiceError | null, response: ExportBoxResponse) => void): ClientUnaryCall;
    exportBox(request: ExportBoxRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: ExportBoxResponse) => void): ClientUnaryCall;
    importBox(request: ImportBoxRequest, callback: (error: ServiceError | null, response: CreateBoxResponse) => void): ClientUnaryCall;
    importBox(request: ImportBoxRequest, metadata: Metadata, callback: (error: ServiceError | null, response: CreateBoxResponse) => void): ClientUnaryCall;
    importBox(request: ImportBoxRequest, metadata: Metadata, options: Partial<CallOptions>, callback: (error: ServiceError | null, response: CreateBoxResponse) => void): ClientUnaryCall;
}
export declare const BoxdClient: {
    new (address: string, credentials: ChannelCredentials, options?: Partial<ClientOptions>): BoxdClient;
    service: typeof BoxdService;
    serviceName: string;
};
type Builtin = Date | Function | Uint8Array | string | number | boolean | undefined;
export type DeepPartial<T> = T extends Builtin ? T : T extends globalThis.Array<infer U> ? globalThis.Array<DeepPartial<U>> : T extends ReadonlyArray<infer U> ? ReadonlyArray<DeepPartial<U>> : T extends {
    $case: string;
    value: unknown;
} ? {
    $case: T["$case"];
    value?: DeepPartial<T["value"]>;
} : T extends {} ? {
    [K in keyof T]?: DeepPartial<T[K]>;
} : Partial<T>;
type KeysOfUnion<T> = T extends T ? keyof T : never;
export type Exact<P, I extends P> = P extends Builtin ? P : P & {
    [K in keyof P]: Exact<P[K], I[K]>;
} & {
    [K in Exclude<keyof I, KeysOfUnion<P>>]: never;
};
export interface MessageFns<T> {
    encode(message: T, writer?: BinaryWriter): BinaryWriter;
    decode(input: BinaryReader | Uint8Array, length?: number): T;
    create<I extends Exact<DeepPartial<T>, I>>(base?: I): T;
    fromPartial<I extends Exact<DeepPartial<T>, I>>(object: I): T;
}
export {};
