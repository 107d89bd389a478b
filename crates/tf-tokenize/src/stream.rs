//! Incremental decoding: ids in one at a time, text deltas out, never a broken character.

use crate::error::Result;
use crate::tokenizer::{DecodeMode, Tokenizer};

/// Turns a stream of ids into text deltas. A multi-byte character split across tokens is
/// held back until complete; bytes that can never complete become U+FFFD exactly where
/// `String::from_utf8_lossy` puts them, so the deltas (plus `finish`) concatenate to
/// `Tokenizer::decode` of all ids.
#[derive(Debug)]
pub struct StreamDecoder<'t> {
    tok: &'t Tokenizer,
    skip_special: bool,
    /// Bytes of an incomplete UTF-8 sequence at the end of what has been seen.
    pending: Vec<u8>,
    /// Whether one leading space is still to be dropped (SentencePiece, start of text).
    strip_pending: bool,
    /// Backend mode: every id so far and the length of the text already emitted.
    ids: Vec<u32>,
    emitted: usize,
}

impl<'t> StreamDecoder<'t> {
    /// A decoder whose output equals `tok.decode(ids, skip_special)` (a SentencePiece
    /// vocabulary's leading space is dropped, as decode drops it).
    pub fn new(tok: &'t Tokenizer, skip_special: bool) -> StreamDecoder<'t> {
        let strip = matches!(
            tok.mode,
            DecodeMode::Bytes {
                strip_leading_space: true
            }
        );
        StreamDecoder {
            tok,
            skip_special,
            pending: Vec::new(),
            strip_pending: strip,
            ids: Vec::new(),
            emitted: 0,
        }
    }

    /// A decoder for text that continues earlier text (generated tokens after a prompt):
    /// a leading space is kept.
    pub fn continuation(tok: &'t Tokenizer, skip_special: bool) -> StreamDecoder<'t> {
        let mut d = StreamDecoder::new(tok, skip_special);
        d.strip_pending = false;
        d
    }

    /// Feeds one id; returns the text it completes (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        if let DecodeMode::Backend = self.tok.mode {
            return self.push_backend(id);
        }
        let mut bytes = self.tok.decode_bytes(id, self.skip_special)?;
        if self.strip_pending && !bytes.is_empty() {
            self.strip_pending = false;
            if bytes[0] == b' ' {
                bytes = &bytes[1..];
            }
        }
        self.pending.extend_from_slice(bytes);
        Ok(self.drain_complete())
    }

    /// Emits every complete character of `pending`, replacing invalid sequences, and keeps an
    /// incomplete tail that later bytes may still complete.
    fn drain_complete(&mut self) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // SAFETY-free: the prefix up to valid_up_to is valid UTF-8 by definition.
                    out.push_str(&String::from_utf8_lossy(&rest[..valid]));
                    match e.error_len() {
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            rest = &rest[valid + bad..];
                        }
                        None => {
                            rest = &rest[valid..];
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }

    fn push_backend(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = self.tok.decode(&self.ids, self.skip_special)?;
        if text.ends_with('\u{FFFD}') || !text.is_char_boundary(self.emitted.min(text.len())) {
            return Ok(String::new());
        }
        if text.len() < self.emitted {
            return Ok(String::new());
        }
        let delta = text[self.emitted..].to_string();
        self.emitted = text.len();
        Ok(delta)
    }

    /// Ends the stream: returns what is still held back (an incomplete character becomes
    /// U+FFFD).
    pub fn finish(&mut self) -> Result<String> {
        if let DecodeMode::Backend = self.tok.mode {
            let text = self.tok.decode(&self.ids, self.skip_special)?;
            let delta = text.get(self.emitted..).unwrap_or("").to_string();
            self.emitted = text.len();
            return Ok(delta);
        }
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        Ok(out)
    }

    /// Whether bytes of an incomplete character are being held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}
