//! Server-sent events as model APIs stream them: bytes in, whole events out (`event:` name,
//! `data:` lines joined by newlines, a blank line ends an event; `\r\n` or `\n`; comments
//! dropped).

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// `event:`, when given.
    pub event: Option<String>,
    pub data: String,
}

/// Turns chunks of bytes, cut anywhere, into events.
#[derive(Debug, Default)]
pub struct SseDecoder {
    pending: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
}

/// A line longer than this is an error, not a reason to buffer without end.
const MAX_LINE: usize = 4 * 1024 * 1024;

impl SseDecoder {
    /// The events completed by `chunk`; an error for a line that is not UTF-8 or too long.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, String> {
        self.pending.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let mut line: Vec<u8> = self.pending.drain(..=end).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8(line).map_err(|_| "a line is not UTF-8".to_string())?;
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        if self.pending.len() > MAX_LINE {
            return Err(format!("a line is longer than {MAX_LINE} bytes"));
        }
        Ok(events)
    }

    /// The event left when the stream ends without its blank line.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.pending.is_empty() {
            let rest = String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
            self.line(rest.trim_end_matches('\r'));
        }
        self.dispatch()
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => self.data.push(value.to_string()),
            "event" => self.event = Some(value.to_string()),
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        if self.data.is_empty() && self.event.is_none() {
            return None;
        }
        let data = std::mem::take(&mut self.data).join("\n");
        Some(SseEvent {
            event: self.event.take(),
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_cut_anywhere_come_out_whole() {
        let stream = b"event: a\r\ndata: {\"x\":\ndata: 1}\r\n\r\n: keep-alive\n\ndata: [DONE]\n\n";
        for cut in 0..stream.len() {
            let mut decoder = SseDecoder::default();
            let mut events = decoder.push(&stream[..cut]).unwrap();
            events.extend(decoder.push(&stream[cut..]).unwrap());
            assert_eq!(
                events,
                [
                    SseEvent {
                        event: Some("a".into()),
                        data: "{\"x\":\n1}".into()
                    },
                    SseEvent {
                        event: None,
                        data: "[DONE]".into()
                    }
                ],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_last_event_without_its_blank_line_is_kept_and_bad_bytes_are_an_error() {
        let mut decoder = SseDecoder::default();
        assert!(decoder.push(b"data: tail").unwrap().is_empty());
        assert_eq!(decoder.finish().unwrap().data, "tail");
        assert!(SseDecoder::default().push(b"data: \xff\xfe\n").is_err());
    }
}
