//! Stop strings over streamed text: emits only text that cannot be the start of a stop string,
//! and cuts the reply where a stop string begins.

/// Watches streamed text for any of a set of stop strings.
#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    held: String,
}

/// What one `feed` produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopFeed {
    /// Text safe to show now.
    pub emit: String,
    /// A stop string was found; `emit` ends just before it and the reply is over.
    pub stopped: bool,
}

impl StopStrings {
    /// Watches for `stops` (empty strings are ignored).
    pub fn new(stops: impl IntoIterator<Item = String>) -> Self {
        StopStrings {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    /// Adds decoded text; returns what may be shown and whether a stop string was hit.
    pub fn feed(&mut self, delta: &str) -> StopFeed {
        self.held.push_str(delta);
        if let Some(cut) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let emit = self.held[..cut].to_string();
            self.held.clear();
            return StopFeed {
                emit,
                stopped: true,
            };
        }
        let keep = self.longest_partial_suffix();
        let split = self.held.len() - keep;
        let emit = self.held[..split].to_string();
        self.held.drain(..split);
        StopFeed {
            emit,
            stopped: false,
        }
    }

    /// Text still held back at the end of the reply (no stop string followed).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length in bytes of the longest suffix of the held text that is a proper prefix of a stop.
    fn longest_partial_suffix(&self) -> usize {
        let mut best = 0;
        for stop in &self.stops {
            for (i, _) in self.held.char_indices() {
                let suffix = &self.held[i..];
                if suffix.len() > best && stop.starts_with(suffix) {
                    best = suffix.len();
                }
            }
        }
        best
    }
}
