/**
 * Server streams of the generated client as async iterables.
 *
 * @module
 */

import type { ClientReadableStream } from "@grpc/grpc-js";

import type { Connection } from "./connection.js";

/**
 * The messages of `call`, each through `map`; a failure becomes a
 * {@link BoxdError}. Leaving the iteration early cancels the call.
 */
export async function* iterate<T, U>(conn: Connection, call: ClientReadableStream<T>, map: (m: T) => U): AsyncGenerator<U, void, undefined> {
  // A cancelled call reports CANCELLED as an error event: expected, not a crash.
  call.on("error", () => undefined);
  let ended = false;
  try {
    for await (const m of call as AsyncIterable<T>) {
      yield map(m);
    }
    ended = true;
  } catch (e) {
    ended = true;
    throw conn.failure(e);
  } finally {
    if (!ended) {
      call.cancel();
    }
  }
}
