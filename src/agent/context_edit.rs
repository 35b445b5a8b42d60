//! Context editing (`model.contextEdit`): as the conversation nears the model's window, the
//! oldest tool results are replaced by a short note, so a long run keeps going instead of
//! failing with "context length exceeded". The system prompt, the user's messages, the model's
//! own words and the latest results stay.

use crate::agent::provider::{Message, Role};

/// Editing starts when the last call used this share of the window.
const TRIGGER: f64 = 0.8;

/// The newest tool results always kept whole.
const KEEP_RECENT: usize = 2;

/// What a cleared result reads as.
pub const CLEARED: &str = "[result cleared to save context; run the code again if you need it]";

/// Clears old tool results when `used` tokens (the last call's input and output, or an
/// estimate) pass the trigger; how many were cleared, if any.
pub fn edit(messages: &mut [Message], used: u64, window: u64) -> Option<usize> {
    let used = used.max(estimate(messages));
    if (used as f64) < TRIGGER * window as f64 {
        return None;
    }
    let results: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::Tool && m.content != CLEARED)
        .map(|(i, _)| i)
        .collect();
    let old = results.len().saturating_sub(KEEP_RECENT);
    for &i in &results[..old] {
        messages[i].content = CLEARED.to_string();
    }
    (old > 0).then_some(old)
}

/// About four characters a token: enough to decide when to edit.
fn estimate(messages: &[Message]) -> u64 {
    let chars: usize = messages
        .iter()
        .map(|m| {
            m.content.len()
                + m.tool_calls
                    .iter()
                    .map(|c| c.input.to_string().len())
                    .sum::<usize>()
        })
        .sum();
    (chars / 4) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation(results: usize, size: usize) -> Vec<Message> {
        let mut m = vec![Message::system("sys"), Message::user("task")];
        for i in 0..results {
            m.push(Message::assistant("", vec![]));
            m.push(Message::tool_result(format!("c{i}"), "x".repeat(size)));
        }
        m
    }

    #[test]
    fn nothing_is_cleared_below_the_trigger() {
        let mut m = conversation(5, 10);
        assert_eq!(edit(&mut m, 100, 1000), None);
        assert!(m.iter().all(|m| m.content != CLEARED));
    }

    #[test]
    fn old_tool_results_are_cleared_and_the_newest_kept() {
        let mut m = conversation(5, 1000);
        assert_eq!(edit(&mut m, 900, 1000), Some(3));
        let tool: Vec<_> = m.iter().filter(|m| m.role == Role::Tool).collect();
        assert!(tool[..3].iter().all(|m| m.content == CLEARED));
        assert!(tool[3..].iter().all(|m| m.content.len() == 1000));
        assert_eq!(m[1].content, "task");
    }
}
