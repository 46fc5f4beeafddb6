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
export declare function iterate<T, U>(conn: Connection, call: ClientReadableStream<T>, map: (m: T) => U): AsyncGenerator<U, void, undefined>;
