/**
 * Server streams of the generated client as async iterables.
 *
 * @module
 */
/**
 * The messages of `call`, each through `map`; a failure becomes a
 * {@link BoxdError}. Leaving the iteration early cancels the call.
 */
export async function* iterate(conn, call, map) {
    // A cancelled call reports CANCELLED as an error event: expected, not a crash.
    call.on("error", () => undefined);
    let ended = false;
    try {
        for await (const m of call) {
            yield map(m);
        }
        ended = true;
    }
    catch (e) {
        ended = true;
        throw conn.failure(e);
    }
    finally {
        if (!ended) {
            call.cancel();
        }
    }
}
