/**
 * Tar streams between the host and a box (`tar-stream` reads and writes
 * them): packing a host path for `CopyIn`, and unpacking what a box sent
 * for `CopyOut` without ever letting it write outside the destination.
 *
 * @module
 */
import type { Readable } from "node:stream";
/** A tar stream being produced: its chunks are `Buffer`s or `Uint8Array`s. */
export interface Archive extends AsyncIterable<unknown> {
    /** Stops producing it (with `err`: as a failure). */
    destroy(err?: Error): void;
}
/** Whether `p` names a directory's contents (`DIR/.`), as docker spells it. */
export declare function namesContents(p: string): boolean;
/**
 * A tar of host path `source` (docker cp's rules): one top-level entry
 * named after its last component, or with `DIR/.` the directory's contents
 * as `./…`. Symlinks travel as links; regular files, directories and
 * symlinks are archived, anything else (sockets, devices, FIFOs) is left
 * out. Errors (a file that changed size while read, say) end the stream.
 */
export declare function packHost(source: string): Archive;
/**
 * Unpacks a tar from `archive` at host path `dest` by docker's rule: into
 * it when it is a directory, else as it (its parent must exist).
 *
 * What the archive holds is never trusted: absolute paths and `..` are
 * refused, no entry is written beneath a symlink (one the archive made or
 * one already there: every directory on the way is looked at with
 * `lstat`), an existing file or symlink is replaced, never written
 * through, a hard link may name only a file this archive wrote, setuid and
 * setgid bits are dropped and the umask applies. Devices and FIFOs are
 * refused.
 */
export declare function unpackHost(dest: string, archive: Readable): Promise<void>;
