/**
 * The facade's own types: boxes and their events with states as words,
 * and the options of a box spec. Everything else is the generated type
 * (`src/gen/`): int64 and uint64 fields are JS numbers (exact up to 2^53;
 * a larger value throws rather than losing precision), bytes are
 * `Buffer`s, enums are numbers of the generated enums.
 *
 * @module
 */
import { BoxState as WireBoxState, IfExists as WireIfExists, } from "./gen/boxd/v1/boxd.js";
const STATES = {
    [WireBoxState.BOX_STATE_UNSPECIFIED]: "unspecified",
    [WireBoxState.BOX_STATE_CREATED]: "created",
    [WireBoxState.BOX_STATE_STARTING]: "starting",
    [WireBoxState.BOX_STATE_RUNNING]: "running",
    [WireBoxState.BOX_STATE_STOPPING]: "stopping",
    [WireBoxState.BOX_STATE_STOPPED]: "stopped",
    [WireBoxState.BOX_STATE_REMOVED]: "removed",
    [WireBoxState.BOX_STATE_FAILED]: "failed",
};
/** The word for a wire state (an unknown number is `"unspecified"`). */
export function stateName(state) {
    return STATES[state] ?? "unspecified";
}
const IF_EXISTS = {
    reuse: WireIfExists.IF_EXISTS_REUSE,
    "same-spec": WireIfExists.IF_EXISTS_SAME_SPEC,
    replace: WireIfExists.IF_EXISTS_REPLACE,
    fail: WireIfExists.IF_EXISTS_FAIL,
};
/** The wire value of {@link IfExists}. */
export function ifExistsWire(v) {
    return IF_EXISTS[v];
}
function mapping(p) {
    return { hostIp: p.hostIp ?? "", hostPort: p.hostPort ?? 0, boxPort: p.boxPort, protocol: p.protocol ?? "" };
}
/** The wire spec of {@link BoxOptions}. */
export function specOf(o) {
    return {
        image: o.image,
        cpus: o.cpus,
        memoryMib: o.memory,
        diskSizeGb: o.diskSizeGb,
        mounts: (o.mounts ?? []).map((m) => ({ hostPath: m.hostPath, guestPath: m.guestPath, readOnly: m.readOnly ?? false })),
        allowNet: o.allowNet ?? [],
        env: o.env ?? {},
        workingDir: o.workingDir ?? "",
        secrets: (o.secrets ?? []).map((s) => ({ name: s.name, hosts: s.hosts, placeholder: s.placeholder ?? "", value: s.value })),
        ports: (o.ports ?? []).map(mapping),
        keepId: o.keepId,
    };
}
/** The facade's form of a wire `BoxInfo`. */
export function boxInfo(b) {
    return { ...b, state: stateName(b.state) };
}
/** The facade's form of a wire `BoxEvent`. */
export function boxEvent(e) {
    return { ...e, state: stateName(e.state) };
}
