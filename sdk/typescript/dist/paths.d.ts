/**
 * Where boxd's socket and home are, resolved as the daemon and every Rust
 * client resolve them (`proto/src/paths.rs`).
 *
 * @module
 */
/** Longest socket path the platform accepts (`sun_path` less the NUL). */
export declare const MAX_SOCKET_PATH: number;
/** The daemon's socket and state directory. */
export interface Paths {
    /** The Unix socket the daemon listens on. */
    socket: string;
    /** The state directory: boxes, images, logs, the lock. */
    home: string;
    /**
     * No option or `BOXD_SOCKET` named the socket (it was derived): the
     * home's lock record may then name the socket its daemon serves.
     */
    socketIsDefault: boolean;
}
/** This process's effective uid (`process.geteuid`; 0 where there is none). */
export declare function myUid(): number;
/**
 * Resolves the paths from explicit values, then `BOXD_SOCKET` and
 * `BOXD_HOME`, then the per-user defaults:
 *
 * - home: `$XDG_DATA_HOME/boxd` (`~/.local/share/boxd`; macOS
 *   `~/Library/Application Support/boxd`);
 * - socket: `$XDG_RUNTIME_DIR/boxd/boxd.sock` where there is one (not on
 *   macOS); else `$TMPDIR/boxd-$UID/boxd.sock` when the temporary
 *   directory is this user's alone; else `HOME/run/boxd.sock`. When only
 *   the home is given, the socket is `HOME/run/boxd.sock`.
 *
 * @throws {InvalidArgumentError} a socket path longer than the platform allows.
 */
export declare function resolvePaths(options?: {
    socket?: string;
    home?: string;
}): Paths;
/**
 * The socket the daemon holding `home` says it serves (the second line of
 * `HOME/boxd.lock`), if the record names one. Node cannot test the lock
 * itself (no `flock`), so a caller believes the record only when the daemon
 * answering there reports this very home.
 */
export declare function lockRecordSocket(home: string): string | undefined;
