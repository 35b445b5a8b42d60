//! Stable topological sort of chain entries by `before`/`after`, with phase sentinels as anchors.
//!
//! Ties go to insertion order. A sentinel is taken only when no real entry is ready, so entries
//! sit as early as their constraints allow and phases stay in their fixed order. A cycle is a
//! configuration error that names its members.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::cascade::entry::{Entry, PHASES};
use crate::error::{Result, SkillError};

/// Sorts `entries` (which may include sentinel entries). Constraints naming entries that are not
/// in the list are ignored. Sentinels present in the list are chained in phase order.
pub fn sort(entries: Vec<Entry>) -> Result<Vec<Entry>> {
    let n = entries.len();
    let mut index: HashMap<&str, Vec<usize>> = HashMap::with_capacity(n);
    for (i, e) in entries.iter().enumerate() {
        index.entry(&*e.name).or_default().push(i);
    }
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut indegree = vec![0usize; n];
    let mut edge = |from: usize, to: usize, succ: &mut Vec<Vec<usize>>| {
        if from != to && !succ[from].contains(&to) {
            succ[from].push(to);
            indegree[to] += 1;
        }
    };
    // Sentinels present form a fixed sequence.
    let mut previous: Option<usize> = None;
    for phase in PHASES {
        if let Some(&i) = index.get(phase).and_then(|v| v.first()) {
            if let Some(p) = previous {
                edge(p, i, &mut succ);
            }
            previous = Some(i);
        }
    }
    for (i, e) in entries.iter().enumerate() {
        for name in e.before.iter() {
            for &j in index.get(&**name).into_iter().flatten() {
                edge(i, j, &mut succ);
            }
        }
        for name in e.after.iter() {
            for &j in index.get(&**name).into_iter().flatten() {
                edge(j, i, &mut succ);
            }
        }
    }
    // Real entries by insertion order first; sentinels only when nothing else is ready.
    let key = |i: usize| (entries[i].is_sentinel(), i);
    let mut ready: BinaryHeap<Reverse<(bool, usize)>> = (0..n)
        .filter(|&i| indegree[i] == 0)
        .map(|i| Reverse(key(i)))
        .collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse((_, i))) = ready.pop() {
        order.push(i);
        for &j in &succ[i] {
            indegree[j] -= 1;
            if indegree[j] == 0 {
                ready.push(Reverse(key(j)));
            }
        }
    }
    if order.len() < n {
        let cycle = find_cycle(&succ, &indegree, &entries);
        return Err(SkillError::config(format!(
            "middleware ordering has a cycle: {}",
            cycle.join(" -> ")
        ))
        .with_data(serde_json::json!({ "cycle": cycle })));
    }
    let mut slots: Vec<Option<Entry>> = entries.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|i| slots[i].take()).collect())
}

/// Follows stuck predecessors from a stuck node until one repeats: every node left with a positive
/// indegree has a predecessor that was never emitted, so the walk always closes a cycle.
fn find_cycle(succ: &[Vec<usize>], indegree: &[usize], entries: &[Entry]) -> Vec<String> {
    let stuck = |i: usize| indegree[i] > 0;
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); entries.len()];
    for (from, tos) in succ.iter().enumerate() {
        for &to in tos {
            preds[to].push(from);
        }
    }
    let Some(start) = (0..entries.len()).find(|&i| stuck(i)) else {
        return Vec::new();
    };
    let mut seen: HashMap<usize, usize> = HashMap::new();
    let mut path = Vec::new();
    let mut node = start;
    while let Some(next) = preds[node].iter().copied().find(|&j| stuck(j)) {
        if let Some(&at) = seen.get(&node) {
            let mut cycle: Vec<String> = path[at..]
                .iter()
                .rev()
                .map(|&i: &usize| entries[i].name.to_string())
                .collect();
            cycle.push(cycle[0].clone());
            return cycle;
        }
        seen.insert(node, path.len());
        path.push(node);
        node = next;
    }
    path.iter().map(|&i| entries[i].name.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::sync::Arc;

    fn e(name: &str, after: &[&str], before: &[&str]) -> Entry {
        let mut entry = Entry::tool(name, Arc::new(Value::Null));
        entry.after = after.iter().map(|s| Arc::from(*s)).collect();
        entry.before = before.iter().map(|s| Arc::from(*s)).collect();
        entry
    }

    fn names(v: &[Entry]) -> Vec<&str> {
        v.iter()
            .filter(|e| !e.is_sentinel())
            .map(|e| &*e.name)
            .collect()
    }

    fn with_phases(mut v: Vec<Entry>) -> Vec<Entry> {
        let mut all: Vec<Entry> = PHASES.iter().map(|p| Entry::sentinel(p)).collect();
        all.append(&mut v);
        all
    }

    #[test]
    fn ties_keep_insertion_order() {
        let out = sort(vec![e("b", &[], &[]), e("a", &[], &[]), e("c", &[], &[])]).unwrap();
        assert_eq!(names(&out), ["b", "a", "c"]);
    }

    #[test]
    fn phases_order_entries_across_sentinels() {
        let out = sort(with_phases(vec![
            e("exec", &["$execute"], &["$post-execute"]),
            e("cfg", &["$configure"], &["$post-configure"]),
            e("pre", &["$pre-configure"], &["$configure"]),
        ]))
        .unwrap();
        assert_eq!(names(&out), ["pre", "cfg", "exec"]);
    }

    #[test]
    fn a_cycle_is_an_error_naming_its_members() {
        let err = sort(vec![e("a", &["b"], &[]), e("b", &["a"], &[])]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("a -> b -> a") || msg.contains("b -> a -> b"),
            "{msg}"
        );
    }

    #[test]
    fn constraints_on_absent_names_are_ignored() {
        let out = sort(vec![e("a", &["ghost"], &["nobody"])]).unwrap();
        assert_eq!(names(&out), ["a"]);
    }
}
