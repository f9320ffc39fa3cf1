//! SIGTERM and SIGINT as a value to wait on, on the standard library alone (a self-pipe written
//! by an async-signal-safe handler; no `libc` or `signal-hook` crate).

use std::fs::File;
use std::io::{self, Read};
use std::os::raw::{c_int, c_void};
use std::os::unix::io::FromRawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

const SIGINT: c_int = 2;
const SIGTERM: c_int = 15;

extern "C" {
    fn signal(signum: c_int, handler: usize) -> usize;
    fn pipe(fds: *mut c_int) -> c_int;
    fn write(fd: c_int, buf: *const c_void, count: usize) -> isize;
}

static WRITE_FD: AtomicI32 = AtomicI32::new(-1);
static READ_END: Mutex<Option<File>> = Mutex::new(None);

extern "C" fn on_signal(sig: c_int) {
    let b = sig as u8;
    let fd = WRITE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: write(2) is async-signal-safe; the buffer is a live local byte.
        unsafe {
            write(fd, &b as *const u8 as *const c_void, 1);
        }
    }
}

/// SIGTERM and SIGINT, caught from [`Termination::install`] on.
pub struct Termination(());

impl Termination {
    /// Catches SIGTERM and SIGINT (once per process; later calls share the handlers).
    pub fn install() -> io::Result<Termination> {
        let mut read = READ_END.lock().unwrap();
        if read.is_none() {
            let mut fds = [0 as c_int; 2];
            // SAFETY: pipe(2) writes two descriptors into the array it is given.
            if unsafe { pipe(fds.as_mut_ptr()) } != 0 {
                return Err(io::Error::last_os_error());
            }
            WRITE_FD.store(fds[1], Ordering::SeqCst);
            // SAFETY: fds[0] is a new descriptor owned by nothing else.
            *read = Some(unsafe { File::from_raw_fd(fds[0]) });
            let handler = on_signal as extern "C" fn(c_int) as usize;
            // SAFETY: installs a handler that only calls write(2).
            unsafe {
                signal(SIGTERM, handler);
                signal(SIGINT, handler);
            }
        }
        Ok(Termination(()))
    }

    /// Blocks until SIGTERM or SIGINT arrives; answers the signal's number.
    pub fn wait(&self) -> i32 {
        let mut file = match READ_END
            .lock()
            .unwrap()
            .as_ref()
            .and_then(|f| f.try_clone().ok())
        {
            Some(f) => f,
            None => return 0,
        };
        let mut b = [0u8; 1];
        loop {
            match file.read(&mut b) {
                Ok(1) => return b[0] as i32,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                _ => return 0,
            }
        }
    }
}
