//! A tiny hub on 127.0.0.1 that answers the requests hf-hub's sync client makes:
//! `GET /api/models/{repo}/revision/{rev}` (commit + file list) and
//! `GET /{repo}/resolve/{rev}/{file}` with `Range` (206, `Content-Range`, `ETag`, `X-Repo-Commit`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

/// One commit: its files.
pub type Files = Vec<(String, Vec<u8>)>;

/// The repositories served: repo -> (branch/tag -> commit), and commit -> files.
#[derive(Default, Clone)]
pub struct Hub {
    pub refs: HashMap<String, HashMap<String, String>>,
    pub commits: HashMap<String, Files>,
}

impl Hub {
    /// Adds `commit` of `repo` under the revision name `rev`.
    pub fn add(&mut self, repo: &str, rev: &str, commit: &str, files: &[(&str, &[u8])]) {
        self.refs
            .entry(repo.into())
            .or_default()
            .insert(rev.into(), commit.into());
        let files = files
            .iter()
            .map(|(n, b)| (n.to_string(), b.to_vec()))
            .collect();
        self.commits.insert(commit.into(), files);
    }

    fn commit_of(&self, repo: &str, rev: &str) -> Option<(String, &Files)> {
        let refs = self.refs.get(repo)?;
        let commit = match refs.get(rev) {
            Some(c) => c.clone(),
            None if refs.values().any(|c| c == rev) => rev.to_string(),
            None => return None,
        };
        let files = self.commits.get(&commit)?;
        Some((commit, files))
    }
}

/// A running fake hub: its base URL and the request paths it has seen.
pub struct Running {
    pub endpoint: String,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Running {
    /// The request paths seen so far that contain `needle`.
    pub fn requests_with(&self, needle: &str) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter().filter(|p| p.contains(needle)).cloned().collect()
    }
}

/// Starts serving `hub` on an ephemeral loopback port (one thread per connection).
pub fn start(hub: Hub) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let log = Arc::new(Mutex::new(Vec::new()));
    let hub = Arc::new(hub);
    let thread_log = log.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let hub = hub.clone();
            let log = thread_log.clone();
            std::thread::spawn(move || {
                let _ = serve(stream, &hub, &log);
            });
        }
    });
    Running { endpoint, log }
}

fn serve(stream: TcpStream, hub: &Hub, log: &Mutex<Vec<String>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string();
    let mut range = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("range") {
                range = Some(value.trim().to_string());
            }
        }
    }
    log.lock().unwrap().push(path.clone());
    let path = path.split('?').next().unwrap_or("").replace("%2F", "/");
    let mut out = stream;
    if let Some(rest) = path.strip_prefix("/api/models/") {
        return answer_info(&mut out, hub, rest);
    }
    answer_file(&mut out, hub, &path, range.as_deref())
}

fn respond(
    out: &mut TcpStream,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(body)?;
    out.flush()
}

fn not_found(out: &mut TcpStream, code: &str) -> std::io::Result<()> {
    let body = format!("{{\"error\":\"{code}\"}}");
    respond(
        out,
        "404 Not Found",
        &[("X-Error-Code", code.into())],
        body.as_bytes(),
    )
}

/// `/api/models/{owner}/{name}/revision/{rev}`.
fn answer_info(out: &mut TcpStream, hub: &Hub, rest: &str) -> std::io::Result<()> {
    let parts: Vec<&str> = rest.splitn(4, '/').collect();
    let [owner, name, "revision", rev] = parts.as_slice() else {
        return not_found(out, "RepoNotFound");
    };
    let repo = format!("{owner}/{name}");
    if !hub.refs.contains_key(&repo) {
        return not_found(out, "RepoNotFound");
    }
    let Some((commit, files)) = hub.commit_of(&repo, rev) else {
        return not_found(out, "RevisionNotFound");
    };
    let siblings: Vec<String> = files
        .iter()
        .map(|(n, _)| format!("{{\"rfilename\":\"{n}\"}}"))
        .collect();
    let body = format!(
        "{{\"id\":\"{repo}\",\"sha\":\"{commit}\",\"siblings\":[{}]}}",
        siblings.join(",")
    );
    respond(
        out,
        "200 OK",
        &[("Content-Type", "application/json".into())],
        body.as_bytes(),
    )
}

/// `/{owner}/{name}/resolve/{rev}/{file}` with an optional `Range: bytes=a-[b]`.
fn answer_file(
    out: &mut TcpStream,
    hub: &Hub,
    path: &str,
    range: Option<&str>,
) -> std::io::Result<()> {
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
    let [owner, name, "resolve", rev, file] = parts.as_slice() else {
        return not_found(out, "EntryNotFound");
    };
    let repo = format!("{owner}/{name}");
    let Some((commit, files)) = hub.commit_of(&repo, rev) else {
        return not_found(out, "RevisionNotFound");
    };
    let Some((_, bytes)) = files.iter().find(|(n, _)| n == file) else {
        return not_found(out, "EntryNotFound");
    };
    let total = bytes.len();
    let (start, end) = match range.and_then(|r| r.strip_prefix("bytes=")) {
        Some(spec) => {
            let (a, b) = spec.split_once('-').unwrap_or((spec, ""));
            let a: usize = a.parse().unwrap_or(0);
            let b: usize = b.parse().unwrap_or(total - 1).min(total - 1);
            (a, b)
        }
        None => (0, total - 1),
    };
    let etag = format!("\"{}\"", hex::encode(Sha256::digest(bytes)));
    let headers = [
        ("ETag", etag),
        ("X-Repo-Commit", commit),
        ("Content-Range", format!("bytes {start}-{end}/{total}")),
    ];
    respond(out, "206 Partial Content", &headers, &bytes[start..=end])
}
