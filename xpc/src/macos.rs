//! The XPC calls: libxpc's C API (no Objective-C runtime), blocks through
//! `block2`. Compiled on macOS only; unverified on the Linux machines this
//! is developed on (see docs/service.md for the check on a Mac).

use std::ffi::{CString, c_char, c_void};
use std::io::{BufRead, Write};
use std::sync::OnceLock;

use block2::RcBlock;

use crate::relay::Relay;
use crate::{FRAME_KEY, SERVICE_NAME};

type XpcObject = *mut c_void;

#[link(name = "System", kind = "dylib")]
unsafe extern "C" {
    fn xpc_main(handler: extern "C" fn(XpcObject)) -> !;
    fn xpc_connection_create(name: *const c_char, queue: *mut c_void) -> XpcObject;
    fn xpc_connection_set_event_handler(
        connection: XpcObject,
        handler: &block2::Block<dyn Fn(XpcObject)>,
    );
    fn xpc_connection_resume(connection: XpcObject);
    fn xpc_connection_cancel(connection: XpcObject);
    fn xpc_connection_send_message(connection: XpcObject, message: XpcObject);
    fn xpc_dictionary_create(
        keys: *const *const c_char,
        values: *const XpcObject,
        count: usize,
    ) -> XpcObject;
    fn xpc_dictionary_set_data(
        dictionary: XpcObject,
        key: *const c_char,
        bytes: *const c_void,
        length: usize,
    );
    fn xpc_dictionary_get_data(
        dictionary: XpcObject,
        key: *const c_char,
        length: *mut usize,
    ) -> *const c_void;
    fn xpc_get_type(object: XpcObject) -> *const c_void;
    fn xpc_retain(object: XpcObject) -> XpcObject;
    fn xpc_release(object: XpcObject);
    static _xpc_type_dictionary: c_void;
}

/// An XPC connection handed between threads (libxpc objects are
/// thread-safe and reference-counted).
struct Conn(XpcObject);
// SAFETY: libxpc connections may be used from any thread.
unsafe impl Send for Conn {}
unsafe impl Sync for Conn {}

fn key() -> CString {
    CString::new(FRAME_KEY).expect("no NUL")
}

fn is_dictionary(object: XpcObject) -> bool {
    // SAFETY: comparing type identities of a live object.
    unsafe { xpc_get_type(object) == &raw const _xpc_type_dictionary }
}

/// `{frame: <bytes>}`.
fn message(frame: &[u8]) -> XpcObject {
    let key = key();
    // SAFETY: an empty dictionary, then one data field copied from `frame`.
    unsafe {
        let dict = xpc_dictionary_create(std::ptr::null(), std::ptr::null(), 0);
        xpc_dictionary_set_data(dict, key.as_ptr(), frame.as_ptr().cast(), frame.len());
        dict
    }
}

/// The frame a message carries, if it is one of ours.
fn frame_of(object: XpcObject) -> Option<Vec<u8>> {
    if !is_dictionary(object) {
        return None;
    }
    let key = key();
    let mut len = 0usize;
    // SAFETY: reads a data field of a live dictionary; the bytes are copied
    // before the message is released.
    let ptr = unsafe { xpc_dictionary_get_data(object, key.as_ptr(), &mut len) };
    (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }.to_vec())
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
}

fn socket() -> std::path::PathBuf {
    boxd_client::Paths::resolve(None, None)
        .map(|p| p.socket)
        .unwrap_or_default()
}

/// The service: `xpc_main` calls `on_connection` for every client.
pub fn service_main() -> ! {
    // SAFETY: xpc_main takes a plain C function and never returns.
    unsafe { xpc_main(on_connection) }
}

extern "C" fn on_connection(connection: XpcObject) {
    // SAFETY: keep the connection alive as long as its relay sends on it.
    let conn = std::sync::Arc::new(Conn(unsafe { xpc_retain(connection) }));
    let out = conn.clone();
    let (relay, _task) = {
        let _guard = runtime().enter();
        Relay::start(socket(), move |frame| {
            let msg = message(&frame);
            // SAFETY: a live connection and a message we own.
            unsafe {
                xpc_connection_send_message(out.0, msg);
                xpc_release(msg);
            }
        })
    };
    let relay = std::sync::Mutex::new(Some(relay));
    let handler = RcBlock::new(move |event: XpcObject| {
        match frame_of(event) {
            Some(frame) => {
                if let Some(r) = relay.lock().expect("relay").as_ref() {
                    r.blocking_send(frame);
                }
            }
            // An error event: the client went away. Ending the relay's
            // input ends the driver and its execs.
            None if !is_dictionary(event) => {
                relay.lock().expect("relay").take();
            }
            None => {}
        }
    });
    // SAFETY: the block is copied by libxpc; the connection is live.
    unsafe {
        xpc_connection_set_event_handler(connection, &handler);
        xpc_connection_resume(connection);
    }
}

/// The bridge: stdin lines to the service, its frames to stdout.
pub fn client_main() -> ! {
    let name = CString::new(SERVICE_NAME).expect("no NUL");
    // SAFETY: creates a connection to the app's XPC service.
    let conn = Conn(unsafe { xpc_connection_create(name.as_ptr(), std::ptr::null_mut()) });
    let handler = RcBlock::new(|event: XpcObject| match frame_of(event) {
        Some(frame) => {
            let mut out = std::io::stdout().lock();
            let _ = out
                .write_all(&frame)
                .and_then(|_| out.write_all(b"\n"))
                .and_then(|_| out.flush());
        }
        None if !is_dictionary(event) => {
            eprintln!("harness-box-client: the XPC connection to {SERVICE_NAME} ended");
            std::process::exit(0);
        }
        None => {}
    });
    // SAFETY: as in the service.
    unsafe {
        xpc_connection_set_event_handler(conn.0, &handler);
        xpc_connection_resume(conn.0);
    }
    for line in std::io::stdin().lock().split(b'\n') {
        let Ok(line) = line else { break };
        let msg = message(&line);
        // SAFETY: a live connection and a message we own.
        unsafe {
            xpc_connection_send_message(conn.0, msg);
            xpc_release(msg);
        }
    }
    // End of input: let the service see the connection close (its driver
    // then ends, as `boxctl jsonl` does at EOF).
    // SAFETY: cancelling a live connection.
    unsafe { xpc_connection_cancel(conn.0) };
    std::thread::sleep(std::time::Duration::from_millis(200));
    std::process::exit(0)
}
