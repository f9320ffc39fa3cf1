//! HTTP/1.1 over `std::net::TcpStream`: JSON requests with a bearer token to one ORBIT runtime,
//! kept-alive connections, `{"error":{…}}` answers turned into [`ApiError`], network failures
//! into [`ConnectionError`]. Plain `http://` only: no TLS (put a TLS-terminating proxy on the
//! worker's side, or use another SDK, where the runtime is reached over TLS).

use crate::cancel::CancelToken;
use crate::error::{codes, ApiError, ConnectionError, Error};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One runtime's address and credentials, with a small pool of kept-alive connections. A
/// worker gives each slot a transport of its own, so a slot's poll, result and next task travel
/// on one connection (behind a balancer that spreads connections over shared-mode servers, they
/// reach the same server).
pub(crate) struct Transport {
    pub(crate) server: String,
    host: String,
    port: u16,
    base: String,
    token: Option<String>,
    idle: Mutex<Vec<TcpStream>>,
}

struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Transport {
    pub(crate) fn new(server: &str, token: Option<String>) -> Result<Transport, Error> {
        let server = server.trim().trim_end_matches('/').to_string();
        if server.is_empty() {
            return Err(Error::Config("the server address is required".into()));
        }
        let rest = if let Some(r) = server.strip_prefix("http://") {
            r
        } else if server.starts_with("https://") {
            return Err(Error::Config(format!(
                "the server address {:?} is https: the Rust SDK speaks plain HTTP only (no TLS)",
                server
            )));
        } else {
            return Err(Error::Config(format!(
                "the server address {:?} is not an http:// URL",
                server
            )));
        };
        let (authority, base) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, String::new()),
        };
        let (host, port) = if let Some(h) = authority.strip_prefix('[') {
            // [::1]:7233
            let end = h
                .find(']')
                .ok_or_else(|| Error::Config("bad IPv6 address".into()))?;
            let port = h[end + 1..].strip_prefix(':').unwrap_or("80");
            (h[..end].to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p),
                None => (authority.to_string(), "80"),
            }
        };
        let port: u16 = port
            .parse()
            .map_err(|_| Error::Config(format!("bad port in the server address {:?}", server)))?;
        if host.is_empty() {
            return Err(Error::Config(format!(
                "no host in the server address {:?}",
                server
            )));
        }
        Ok(Transport {
            server,
            host,
            port,
            base,
            token: token.filter(|t| !t.is_empty()),
            idle: Mutex::new(Vec::new()),
        })
    }

    fn conn_error(&self, reason: impl Into<String>) -> Error {
        Error::Connection(ConnectionError {
            server: self.server.clone(),
            reason: reason.into(),
        })
    }

    fn connect(&self) -> io::Result<TcpStream> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        for addr in (self.host.as_str(), self.port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// A kept-alive connection the server has not closed meanwhile, or None.
    fn reuse(&self) -> Option<TcpStream> {
        loop {
            let s = self.idle.lock().unwrap().pop()?;
            if s.set_nonblocking(true).is_err() {
                continue;
            }
            let mut b = [0u8; 1];
            let alive =
                matches!(s.peek(&mut b), Err(ref e) if e.kind() == io::ErrorKind::WouldBlock);
            if alive && s.set_nonblocking(false).is_ok() {
                return Some(s);
            }
        }
    }

    /// Sends one request; `timeout` bounds each read and write, `cancel` ends it early
    /// (answering [`Error::Cancelled`]).
    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        timeout: Duration,
        cancel: Option<&CancelToken>,
    ) -> Result<Answer, Error> {
        if cancel.is_some_and(|c| c.is_cancelled()) {
            return Err(Error::Cancelled);
        }
        let mut head = format!(
            "{} {}{} HTTP/1.1\r\nhost: {}:{}\r\naccept: application/json\r\nuser-agent: orbit-rust/{}\r\n",
            method,
            self.base,
            path,
            self.host,
            self.port,
            env!("CARGO_PKG_VERSION")
        );
        if let Some(t) = &self.token {
            head.push_str(&format!("authorization: Bearer {}\r\n", t));
        }
        let body = body.unwrap_or(&[]);
        if method != "GET" {
            head.push_str(&format!(
                "content-type: application/json\r\ncontent-length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(body);

        let mut reused = self.reuse();
        loop {
            let was_reused = reused.is_some();
            let stream = match reused.take() {
                Some(s) => s,
                None => self.connect().map_err(|e| self.conn_error(e.to_string()))?,
            };
            let _ = stream.set_read_timeout(Some(timeout));
            let _ = stream.set_write_timeout(Some(timeout));
            // A cancellation shuts the socket down, which ends a blocked read at once.
            let hook = cancel.and_then(|c| {
                let s = stream.try_clone().ok()?;
                c.on_cancel(Box::new(move || {
                    let _ = s.shutdown(Shutdown::Both);
                }))
            });
            let result = exchange(&stream, &request, method == "HEAD");
            if let Some(c) = cancel {
                c.remove(hook);
                if c.is_cancelled() {
                    return Err(Error::Cancelled);
                }
            }
            match result {
                Ok((answer, keep)) => {
                    if keep {
                        let mut idle = self.idle.lock().unwrap();
                        if idle.len() < 4 {
                            idle.push(stream);
                        }
                    }
                    return Ok(answer);
                }
                // A kept-alive connection the server closed just now (nothing of an answer read,
                // no timeout): once more on a new one.
                Err((e, false))
                    if was_reused
                        && !matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                {
                    continue;
                }
                Err((e, _)) => {
                    let reason = if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) {
                        format!("timed out after {}", format_duration(timeout))
                    } else {
                        e.to_string()
                    };
                    return Err(self.conn_error(reason));
                }
            }
        }
    }

    /// Sends a JSON request and decodes a 2xx answer's JSON into `T` (an empty body as null).
    pub(crate) fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&(impl Serialize + ?Sized)>,
        timeout: Duration,
        cancel: Option<&CancelToken>,
    ) -> Result<T, Error> {
        let data = match body {
            Some(b) => Some(
                serde_json::to_vec(b)
                    .map_err(|e| Error::Validation(format!("request body: {}", e)))?,
            ),
            None => None,
        };
        let a = self.send(method, path, data.as_deref(), timeout, cancel)?;
        if !(200..300).contains(&a.status) {
            return Err(ApiError::from_answer(a.status, &a.body, method, path).into());
        }
        let bytes: &[u8] = if a.body.iter().all(u8::is_ascii_whitespace) {
            b"null"
        } else {
            &a.body
        };
        serde_json::from_slice(bytes).map_err(|e| {
            Error::from(ApiError {
                status: a.status,
                code: codes::INVALID_RESPONSE.into(),
                message: format!(
                    "the ORBIT runtime answered {} {} with a body that is not the JSON expected: {}",
                    method, path, e
                ),
                details: Default::default(),
                method: method.into(),
                path: path.into(),
                body: String::from_utf8_lossy(&a.body).into_owned(),
            })
        })
    }
}

/// Writes the request and reads the answer. The error's flag tells whether any of the answer
/// was read (a request is repeated on a new connection only when nothing was).
fn exchange(
    stream: &TcpStream,
    request: &[u8],
    head_only: bool,
) -> Result<(Answer, bool), (io::Error, bool)> {
    let mut w = stream;
    w.write_all(request).map_err(|e| (e, false))?;
    w.flush().map_err(|e| (e, false))?;
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    let n = r.read_line(&mut line).map_err(|e| (e, false))?;
    if n == 0 {
        return Err((
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection was closed before an answer",
            ),
            false,
        ));
    }
    let bad = |m: &str| {
        (
            io::Error::new(io::ErrorKind::InvalidData, m.to_string()),
            true,
        )
    };
    let mut parts = line.split_whitespace();
    let version = parts.next().unwrap_or("");
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("not an HTTP answer"))?;
    if !version.starts_with("HTTP/1.") {
        return Err(bad("not an HTTP/1.x answer"));
    }
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut keep = version == "HTTP/1.1";
    loop {
        line.clear();
        if r.read_line(&mut line).map_err(|e| (e, true))? == 0 {
            return Err(bad("the connection was closed in the answer's head"));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            let v = v.trim();
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = v.parse().ok(),
                "transfer-encoding" => chunked = v.to_ascii_lowercase().contains("chunked"),
                "connection" => {
                    let v = v.to_ascii_lowercase();
                    if v.contains("close") {
                        keep = false;
                    } else if v.contains("keep-alive") {
                        keep = true;
                    }
                }
                _ => {}
            }
        }
    }
    let mut body = Vec::new();
    if head_only || status == 204 || status == 304 || (100..200).contains(&status) {
    } else if chunked {
        loop {
            line.clear();
            r.read_line(&mut line).map_err(|e| (e, true))?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| bad("bad chunk size"))?;
            if size == 0 {
                // trailers, then the empty line
                loop {
                    line.clear();
                    if r.read_line(&mut line).map_err(|e| (e, true))? == 0 || line.trim().is_empty()
                    {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..]).map_err(|e| (e, true))?;
            line.clear();
            r.read_line(&mut line).map_err(|e| (e, true))?;
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        r.read_exact(&mut body).map_err(|e| (e, true))?;
    } else {
        r.read_to_end(&mut body).map_err(|e| (e, true))?;
        keep = false;
    }
    if !r.buffer().is_empty() {
        keep = false; // bytes past the answer: do not reuse
    }
    Ok((Answer { status, body }, keep))
}

/// Percent-encodes a path segment.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{:02X}", b));
        }
    }
    out
}

/// A delay as the SDKs' log lines write it: 0.2s, 1.6s, 5s.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        let t = format!("{:.1}", s);
        format!("{}s", t.strip_suffix(".0").unwrap_or(&t))
    } else {
        format!("{:.0}s", s)
    }
}
