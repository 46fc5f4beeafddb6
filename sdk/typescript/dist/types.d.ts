/**
 * The facade's own types: boxes and their events with states as words,
 * and the options of a box spec. Everything else is the generated type
 * (`src/gen/`): int64 and uint64 fields are JS numbers (exact up to 2^53;
 * a larger value throws rather than losing precision), bytes are
 * `Buffer`s, enums are numbers of the generated enums.
 *
 * @module
 */
import { BoxState as WireBoxState, IfExists as WireIfExists, type BoxEvent as WireBoxEvent, type BoxInfo as WireBoxInfo, type BoxSpec } from "./gen/boxd/v1/boxd.js";
/** A box's state, as a word. */
export type BoxState = "unspecified" | "created" | "starting" | "running" | "stopping" | "stopped" | "removed" | "failed";
/** The word for a wire state (an unknown number is `"unspecified"`). */
export declare function stateName(state: WireBoxState): BoxState;
/** A host directory shown in a box. */
export interface Mount {
    /** Absolute host path; it must exist. */
    hostPath: string;
    /** Absolute path in the box. */
    guestPath: string;
    readOnly?: boolean;
}
/** A box port published on the host while the box runs. */
export interface PortMapping {
    /** Box port (1-65535). */
    boxPort: number;
    /** Host port; 0 or unset: any free one (the bound one is in {@link BoxInfo.ports}). */
    hostPort?: number;
    /** Host address (default `127.0.0.1`). */
    hostIp?: string;
    /** `"tcp"` (the default and the only one). */
    protocol?: string;
}
/** A credential the box uses by placeholder; boxd keeps the value. */
export interface Secret {
    /** An environment variable name. */
    name: string;
    /** Hosts the value may go to (each within `allowNet`). */
    hosts: string[];
    /** The value; write-only (replies carry it empty). */
    value: string;
    /** Default `BOXD_SECRET_PLACEHOLDER_<name>`. */
    placeholder?: string;
}
/** What a box is made of. */
export interface BoxOptions {
    /** A registry reference (`"alpine:3.20"`) or an absolute path to an OCI image layout. */
    image: string;
    mounts?: Mount[];
    /** Hosts the box may reach (names, `*.suffix`, IPs, CIDRs); empty: no network. */
    allowNet?: string[];
    secrets?: Secret[];
    env?: Record<string, string>;
    /** Memory limit, MiB. */
    memory?: number;
    cpus?: number;
    /** Disk size, GiB (where the engine gives a box a disk). */
    diskSizeGb?: number;
    ports?: PortMapping[];
    /** The default working directory of execs. */
    workingDir?: string;
    /** Mounted directories' owners become this box user (podman's keep-id). */
    keepId?: {
        uid: number;
        gid: number;
    };
}
/** What a create does when a box of its name exists. */
export type IfExists = "reuse" | "same-spec" | "replace" | "fail";
/** The wire value of {@link IfExists}. */
export declare function ifExistsWire(v: IfExists): WireIfExists;
/** The wire spec of {@link BoxOptions}. */
export declare function specOf(o: BoxOptions): BoxSpec;
/** A box as boxd describes it ({@link WireBoxInfo} with its state as a word). */
export type BoxInfo = Omit<WireBoxInfo, "state"> & {
    state: BoxState;
};
/** The facade's form of a wire `BoxInfo`. */
export declare function boxInfo(b: WireBoxInfo): BoxInfo;
/** A box state change ({@link WireBoxEvent} with its state as a word). */
export type BoxEvent = Omit<WireBoxEvent, "state"> & {
    state: BoxState;
};
/** The facade's form of a wire `BoxEvent`. */
export declare function boxEvent(e: WireBoxEvent): BoxEvent;
