/**
 * Whether a socket may be trusted with this user's requests (and the
 * secrets some of them carry), checked before every call: the same rules
 * as the Rust client (`fs/src/trust.rs`), as far as Node can check them.
 *
 * A socket is trusted when nobody but this user (and root) can put
 * something else in its place:
 *
 * - every directory looked into on the way (after symlinks, resolved one
 *   component at a time as the kernel would) belongs to this user or root
 *   and, when others may write it, is sticky (like `/tmp`);
 * - every symlink followed belongs to this user or root;
 * - the socket's own directory belongs to this user and is closed to group
 *   and others (0700);
 * - the socket belongs to this user and is not writable by group/others.
 *
 * What Node cannot check: the uid of the process answering on the socket
 * (`SO_PEERCRED`; Node has no API for it). The checks above cover it as
 * far as a file can: a socket file belongs to the process that bound it,
 * and only this user (or root) can bind in a directory of this user's that
 * is closed to others. In the other direction boxd itself checks every
 * peer's uid and refuses a client of another user (`PERMISSION_DENIED`), so
 * a genuine boxd never serves anyone else.
 *
 * @module
 */
/**
 * Checks everything about `socket` a client can check before it sends a
 * byte (see the module's comment); returns the socket's resolved path.
 *
 * @throws {UntrustedSocketError} when it must not be used.
 * @throws an `ENOENT` error (`code: "ENOENT"`) when there is no socket
 *   (only once the directories on the way passed and the socket's
 *   directory, if any, is this user's: boxd makes it private when it
 *   starts).
 */
export declare function checkSocket(socket: string, me: number): string;
