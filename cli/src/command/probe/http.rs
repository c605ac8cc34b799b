//! A minimal HTTP/1.1 client over `std::net`, for `probe` alone: one `POST`
//! per connection (`Connection: close`), a body framed by `Content-Length`,
//! by chunks, or by the connection's end, handed to a sink as it arrives
//! (so a stream of server-sent events is read as it comes), and one
//! deadline over everything (connecting, writing, every read): a request
//! never outlives it. No TLS: the endpoints probed are a deployment's own
//! servers, reached over plain HTTP as its router reaches them.
//!
//! Why not a crate: see the comment on `[features] cli` in Cargo.toml.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// An endpoint: `http://HOST[:PORT][/PREFIX]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    host: String,
    port: u16,
    /// Prepended to every path (no trailing `/`).
    prefix: String,
}

impl Url {
    /// Reads `http://HOST[:PORT][/PREFIX]` (port 80 by default).
    pub fn parse(text: &str) -> Result<Url, String> {
        let rest = text.strip_prefix("http://").ok_or_else(|| {
            format!("{text:?}: expected http://HOST[:PORT] (https is not spoken)")
        })?;
        let (authority, prefix) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        let (host, port) = match authority.rsplit_once(':') {
            // An IPv6 address in brackets has colons of its own.
            Some((host, port)) if !port.contains(']') => {
                let port = port
                    .parse::<u16>()
                    .map_err(|e| format!("{text:?}: port {port:?}: {e}"))?;
                (host, port)
            }
            _ => (authority, 80),
        };
        if host.is_empty() {
            return Err(format!("{text:?}: no host"));
        }
        Ok(Url {
            host: host.to_owned(),
            port,
            prefix: prefix.trim_end_matches('/').to_owned(),
        })
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}:{}{}", self.host, self.port, self.prefix)
    }
}

/// Why a request failed.
#[derive(Debug, PartialEq, Eq)]
pub enum HttpError {
    /// No connection could be made.
    Connect(String),
    /// The deadline passed (`what` was under way).
    Timeout {
        /// The request's time limit.
        limit: Duration,
        /// What was under way.
        what: &'static str,
    },
    /// The server answered with a status other than 2xx.
    Status {
        /// The status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The body ended before its framing said it would.
    Truncated(String),
    /// The answer is not HTTP as this client reads it.
    Malformed(String),
    /// Reading or writing failed.
    Io(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Connect(why) => write!(f, "cannot connect: {why}"),
            HttpError::Timeout { limit, what } => {
                write!(f, "timed out after {limit:?} ({what})")
            }
            HttpError::Status { status, body } => write!(f, "answered {status}: {body}"),
            HttpError::Truncated(why) => write!(f, "the body was cut off: {why}"),
            HttpError::Malformed(why) => write!(f, "not an HTTP answer: {why}"),
            HttpError::Io(why) => write!(f, "{why}"),
        }
    }
}

/// The longest response head read (status line and headers).
const MAX_HEAD: usize = 64 * 1024;
/// How much of an error status's body is kept for the message.
const ERROR_BODY: usize = 300;

/// A connection's reading side: a buffer over the stream, every read bounded
/// by the deadline.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Where unread bytes start in `buf`.
    at: usize,
    deadline: Instant,
    limit: Duration,
}

impl Conn {
    fn remaining(&self, what: &'static str) -> Result<Duration, HttpError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HttpError::Timeout {
                limit: self.limit,
                what,
            });
        }
        Ok(left)
    }

    /// Reads more into the buffer; `Ok(false)` at the end of the stream.
    fn fill(&mut self, what: &'static str) -> Result<bool, HttpError> {
        if self.at > 0 && self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        }
        let left = self.remaining(what)?;
        self.stream
            .set_read_timeout(Some(left))
            .map_err(|e| HttpError::Io(e.to_string()))?;
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.buf
                        .extend_from_slice(chunk.get(..n).unwrap_or_default());
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // A connection reset or aborted mid-answer ends it: the
                // framing says whether the answer was whole.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset
                            | io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::UnexpectedEof
                    ) =>
                {
                    return Ok(false)
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(HttpError::Timeout {
                        limit: self.limit,
                        what,
                    })
                }
                Err(e) => return Err(HttpError::Io(format!("{what}: {e}"))),
            }
        }
    }

    fn unread(&self) -> &[u8] {
        self.buf.get(self.at..).unwrap_or_default()
    }

    /// Up to `n` buffered bytes, consumed.
    fn take(&mut self, n: usize) -> &[u8] {
        let from = self.at;
        let to = from.saturating_add(n).min(self.buf.len());
        self.at = to;
        self.buf.get(from..to).unwrap_or_default()
    }

    /// One line (CRLF or LF ended), without its end.
    fn line(&mut self, what: &'static str) -> Result<String, HttpError> {
        loop {
            if let Some(end) = self.unread().iter().position(|&b| b == b'\n') {
                let line = String::from_utf8_lossy(self.take(end + 1)).into_owned();
                return Ok(line.trim_end_matches(['\r', '\n']).to_owned());
            }
            if self.unread().len() > MAX_HEAD {
                return Err(HttpError::Malformed(format!(
                    "a line longer than {MAX_HEAD} bytes"
                )));
            }
            if !self.fill(what)? {
                return Err(HttpError::Truncated(format!(
                    "the connection closed in {what}"
                )));
            }
        }
    }
}

/// The head of an answer.
#[derive(Debug)]
pub struct Head {
    /// The status code.
    pub status: u16,
    /// `Content-Type`, when given.
    pub content_type: Option<String>,
}

/// How an HTTP response's body is framed: by `Content-Length`, by chunks,
/// or by the connection's end.
enum BodyFraming {
    Length(u64),
    Chunked,
    UntilClose,
}

/// Connects to the first address of `url` that answers, within `deadline`.
fn connect(url: &Url, deadline: Instant, limit: Duration) -> Result<TcpStream, HttpError> {
    let addrs: Vec<SocketAddr> = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| HttpError::Connect(format!("{}:{}: {e}", url.host, url.port)))?
        .collect();
    let mut last = format!("{}:{}: no address", url.host, url.port);
    for addr in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HttpError::Timeout {
                limit,
                what: "connecting",
            });
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(stream) => return Ok(stream),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                return Err(HttpError::Timeout {
                    limit,
                    what: "connecting",
                })
            }
            Err(e) => last = format!("{addr}: {e}"),
        }
    }
    Err(HttpError::Connect(last))
}

/// `POST`s `body` (JSON) to `url` + `path` and hands the answer's body to
/// `sink` as it arrives; the whole exchange within `timeout`. A status
/// other than 2xx is [`HttpError::Status`] (its body is not given to the
/// sink).
pub fn post(
    url: &Url,
    path: &str,
    body: &[u8],
    timeout: Duration,
    sink: &mut dyn FnMut(&[u8]),
) -> Result<Head, HttpError> {
    let deadline = Instant::now() + timeout;
    let stream = connect(url, deadline, timeout)?;
    let mut conn = Conn {
        stream,
        buf: Vec::new(),
        at: 0,
        deadline,
        limit: timeout,
    };
    let left = conn.remaining("sending the request")?;
    conn.stream
        .set_write_timeout(Some(left))
        .map_err(|e| HttpError::Io(e.to_string()))?;
    let head = format!(
        "POST {}{path} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
         Connection: close\r\nUser-Agent: pd-stitch-probe\r\n\r\n",
        url.prefix,
        url.host,
        url.port,
        body.len()
    );
    // One write, without Nagle's delay: a head and a body written apart
    // wait for the server's delayed ACK (40 ms a request on Linux).
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    let sent = conn
        .stream
        .set_nodelay(true)
        .and_then(|()| conn.stream.write_all(&request))
        .and_then(|()| conn.stream.flush());
    if let Err(e) = sent {
        return Err(match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => HttpError::Timeout {
                limit: timeout,
                what: "sending the request",
            },
            _ => HttpError::Io(format!("sending the request: {e}")),
        });
    }
    let (head, framing) = read_head(&mut conn)?;
    if !(200..300).contains(&head.status) {
        let mut text = Vec::new();
        // The error's body, as far as it comes in time; its failure is not
        // the request's.
        let _ = read_body(&mut conn, framing, &mut |bytes: &[u8]| {
            if text.len() < ERROR_BODY {
                text.extend_from_slice(bytes);
            }
        });
        text.truncate(ERROR_BODY);
        return Err(HttpError::Status {
            status: head.status,
            body: String::from_utf8_lossy(&text).trim().to_owned(),
        });
    }
    read_body(&mut conn, framing, sink)?;
    Ok(head)
}

/// The status line and headers (1xx interim answers skipped).
fn read_head(conn: &mut Conn) -> Result<(Head, BodyFraming), HttpError> {
    loop {
        let status_line = conn.line("reading the status line")?;
        let mut words = status_line.split_whitespace();
        let version = words.next().unwrap_or_default();
        if !version.starts_with("HTTP/1.") {
            return Err(HttpError::Malformed(format!(
                "status line {:?}",
                describe(&status_line)
            )));
        }
        let status = words
            .next()
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| {
                HttpError::Malformed(format!("status line {:?}", describe(&status_line)))
            })?;
        let mut content_type = None;
        let mut length = None;
        let mut chunked = false;
        let mut size = status_line.len();
        loop {
            let line = conn.line("reading the headers")?;
            size += line.len();
            if size > MAX_HEAD {
                return Err(HttpError::Malformed(format!(
                    "headers longer than {MAX_HEAD} bytes"
                )));
            }
            if line.is_empty() {
                break;
            }
            let Some((name, value)) = line.split_once(':') else {
                return Err(HttpError::Malformed(format!(
                    "header {:?}",
                    describe(&line)
                )));
            };
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "content-type" => content_type = Some(value.to_owned()),
                "content-length" => {
                    length =
                        Some(value.parse::<u64>().map_err(|_| {
                            HttpError::Malformed(format!("Content-Length {value:?}"))
                        })?);
                }
                "transfer-encoding" => {
                    chunked = value.to_ascii_lowercase().contains("chunked");
                }
                _ => {}
            }
        }
        if (100..200).contains(&status) {
            continue;
        }
        let framing = match (chunked, length) {
            (true, _) => BodyFraming::Chunked,
            (false, Some(n)) => BodyFraming::Length(n),
            (false, None) => BodyFraming::UntilClose,
        };
        return Ok((
            Head {
                status,
                content_type,
            },
            framing,
        ));
    }
}

/// At most 80 characters of `text`, for messages.
fn describe(text: &str) -> String {
    text.chars().take(80).collect()
}

/// The body, as framed, to `sink`.
fn read_body(
    conn: &mut Conn,
    framing: BodyFraming,
    sink: &mut dyn FnMut(&[u8]),
) -> Result<(), HttpError> {
    match framing {
        BodyFraming::Length(mut left) => {
            while left > 0 {
                if conn.unread().is_empty() && !conn.fill("reading the body")? {
                    return Err(HttpError::Truncated(format!(
                        "the connection closed {left} bytes before the Content-Length's end"
                    )));
                }
                let n = usize::try_from(left).unwrap_or(usize::MAX);
                let bytes = conn.take(n);
                left -= bytes.len() as u64;
                sink(bytes);
            }
            Ok(())
        }
        BodyFraming::UntilClose => loop {
            if !conn.unread().is_empty() {
                let n = conn.unread().len();
                sink(conn.take(n));
            }
            if !conn.fill("reading the body")? {
                return Ok(());
            }
        },
        BodyFraming::Chunked => loop {
            let line = conn.line("reading a chunk's size")?;
            let digits = line.split(';').next().unwrap_or_default().trim();
            let size = u64::from_str_radix(digits, 16)
                .map_err(|_| HttpError::Malformed(format!("chunk size {:?}", describe(&line))))?;
            if size == 0 {
                // Trailers, up to the blank line.
                while !conn.line("reading the trailers")?.is_empty() {}
                return Ok(());
            }
            let mut left = size;
            while left > 0 {
                if conn.unread().is_empty() && !conn.fill("reading a chunk")? {
                    return Err(HttpError::Truncated(format!(
                        "the connection closed {left} bytes before a chunk's end"
                    )));
                }
                let n = usize::try_from(left).unwrap_or(usize::MAX);
                let bytes = conn.take(n);
                left -= bytes.len() as u64;
                sink(bytes);
            }
            if !conn.line("reading a chunk's end")?.is_empty() {
                return Err(HttpError::Malformed("a chunk longer than its size".into()));
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// A server on loopback that reads one request and writes `answer`,
    /// `pause` between its pieces.
    fn serve(pieces: Vec<&'static [u8]>, pause: Duration) -> Url {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buf).unwrap();
                seen.extend_from_slice(&buf[..n]);
            }
            for piece in pieces {
                if stream.write_all(piece).is_err() {
                    return;
                }
                thread::sleep(pause);
            }
        });
        Url::parse(&format!("http://127.0.0.1:{port}/v1/")).unwrap()
    }

    fn get(url: &Url, timeout: Duration) -> (Result<Head, HttpError>, Vec<u8>) {
        let mut body = Vec::new();
        let head = post(url, "/x", b"{}", timeout, &mut |b: &[u8]| {
            body.extend_from_slice(b)
        });
        (head, body)
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn urls_are_read_with_their_port_and_prefix() {
        let url = Url::parse("http://10.0.0.1:8000/api/").unwrap();
        assert_eq!(url.to_string(), "http://10.0.0.1:8000/api");
        assert_eq!(Url::parse("http://h").unwrap().to_string(), "http://h:80");
        assert!(Url::parse("https://h")
            .unwrap_err()
            .contains("https is not spoken"));
        assert!(Url::parse("http://h:x").unwrap_err().contains("port"));
        assert!(Url::parse("http://:80").unwrap_err().contains("no host"));
    }

    #[test]
    fn bodies_are_read_by_length_by_chunks_and_to_the_end() {
        let url = serve(
            vec![b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", b"lo"],
            Duration::from_millis(20),
        );
        let (head, body) = get(&url, SECOND);
        assert_eq!(head.unwrap().status, 200);
        assert_eq!(body, b"hello");
        let url = serve(
            vec![
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n",
                b"Content-Type: text/event-stream\r\n\r\n3\r\nab",
                b"c\r\nA;x=1\r\n0123456789\r\n0\r\nTrailer: t\r\n\r\n",
            ],
            Duration::from_millis(20),
        );
        let (head, body) = get(&url, SECOND);
        assert_eq!(
            head.unwrap().content_type.as_deref(),
            Some("text/event-stream")
        );
        assert_eq!(body, b"abc0123456789");
        let url = serve(vec![b"HTTP/1.0 200 OK\r\n\r\nall of it"], Duration::ZERO);
        assert_eq!(get(&url, SECOND).1, b"all of it");
    }

    #[test]
    fn failures_are_typed_and_bounded_by_the_deadline() {
        let url = serve(
            vec![b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy"],
            Duration::ZERO,
        );
        assert_eq!(
            get(&url, SECOND).0.unwrap_err(),
            HttpError::Status {
                status: 503,
                body: "busy".into()
            }
        );
        let url = serve(
            vec![b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"],
            Duration::ZERO,
        );
        let error = get(&url, SECOND).0.unwrap_err();
        assert_eq!(
            error.to_string(),
            "the body was cut off: the connection closed 6 bytes before the Content-Length's end"
        );
        let url = serve(
            vec![b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"],
            Duration::ZERO,
        );
        assert!(matches!(get(&url, SECOND).0, Err(HttpError::Truncated(_))));
        let url = serve(vec![b"SSH-2.0-OpenSSH\r\n"], Duration::ZERO);
        assert!(matches!(get(&url, SECOND).0, Err(HttpError::Malformed(_))));
        // A server that never finishes: the deadline ends the request.
        let url = serve(
            vec![b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab", b"cd"],
            Duration::from_secs(3),
        );
        let started = Instant::now();
        let limit = Duration::from_millis(300);
        assert_eq!(
            get(&url, limit).0.unwrap_err(),
            HttpError::Timeout {
                limit,
                what: "reading the body"
            }
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        // Nobody listening: a connection error, at once.
        let free = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = Url::parse(&format!("http://{}", free.local_addr().unwrap())).unwrap();
        drop(free);
        assert!(matches!(get(&url, SECOND).0, Err(HttpError::Connect(_))));
    }
}
