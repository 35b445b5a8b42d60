//! Automatic static: Tarjan's strongly connected components over the tool dependency graph.
//!
//! A tool depends on every tool named by a key of its merged metadata. A key whose tool sits in
//! the same component as the tool being invoked would make a pipeline contain itself, so it is
//! demoted to data. Components are computed lazily from whichever tool is asked about first and
//! remembered for the index's lifetime: Tarjan finishes a whole component before assigning it,
//! so a node assigned by an earlier run never reaches a node of a later run's stack.

use std::collections::HashMap;

use crate::error::Result;

#[derive(Default)]
pub struct SccState {
    component: HashMap<String, usize>,
    next_component: usize,
}

impl SccState {
    /// The component id of `start`, computing components for everything reachable from it.
    /// `edges(name)` gives the tool keys of `name` (before demotion).
    pub fn component_of(
        &mut self,
        start: &str,
        edges: &mut dyn FnMut(&str) -> Result<Vec<String>>,
    ) -> Result<usize> {
        if let Some(&c) = self.component.get(start) {
            return Ok(c);
        }
        let mut run = Run {
            index: HashMap::new(),
            low: HashMap::new(),
            on_stack: HashMap::new(),
            stack: Vec::new(),
            counter: 0,
        };
        self.strongconnect(start, edges, &mut run)?;
        Ok(self.component[start])
    }

    fn strongconnect(
        &mut self,
        root: &str,
        edges: &mut dyn FnMut(&str) -> Result<Vec<String>>,
        run: &mut Run,
    ) -> Result<()> {
        // Iterative Tarjan: (node, its successors, next successor to look at).
        let mut work: Vec<(String, Vec<String>, usize)> = Vec::new();
        run.visit(root);
        work.push((root.to_string(), edges(root)?, 0));
        while let Some(top) = work.last_mut() {
            if top.2 < top.1.len() {
                let next = top.1[top.2].clone();
                top.2 += 1;
                let node = top.0.clone();
                if self.component.contains_key(&next) {
                    continue;
                }
                if !run.index.contains_key(&next) {
                    run.visit(&next);
                    let next_edges = edges(&next)?;
                    work.push((next, next_edges, 0));
                } else if run.on_stack.get(&next).copied().unwrap_or(false) {
                    let low = run.low[&node].min(run.index[&next]);
                    run.low.insert(node, low);
                }
                continue;
            }
            let node = top.0.clone();
            work.pop();
            if let Some((parent, _, _)) = work.last() {
                let low = run.low[parent].min(run.low[&node]);
                run.low.insert(parent.clone(), low);
            }
            if run.low[&node] == run.index[&node] {
                let id = self.next_component;
                self.next_component += 1;
                while let Some(member) = run.stack.pop() {
                    run.on_stack.insert(member.clone(), false);
                    let done = member == node;
                    self.component.insert(member, id);
                    if done {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

struct Run {
    index: HashMap<String, usize>,
    low: HashMap<String, usize>,
    on_stack: HashMap<String, bool>,
    stack: Vec<String>,
    counter: usize,
}

impl Run {
    fn visit(&mut self, node: &str) {
        self.index.insert(node.to_string(), self.counter);
        self.low.insert(node.to_string(), self.counter);
        self.counter += 1;
        self.stack.push(node.to_string());
        self.on_stack.insert(node.to_string(), true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(name: &str) -> Vec<String> {
        let to: &[&str] = match name {
            "user" => &["a", "b"],
            "a" => &["b"],
            "b" => &["a", "c"],
            "c" => &[],
            _ => &[],
        };
        to.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn members_of_a_cycle_share_a_component_and_others_do_not() {
        let mut state = SccState::default();
        let user = state.component_of("user", &mut |n| Ok(graph(n))).unwrap();
        let a = state.component_of("a", &mut |n| Ok(graph(n))).unwrap();
        let b = state.component_of("b", &mut |n| Ok(graph(n))).unwrap();
        let c = state.component_of("c", &mut |n| Ok(graph(n))).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(user, a);
    }

    #[test]
    fn later_runs_reuse_finished_components() {
        let mut state = SccState::default();
        let a = state.component_of("a", &mut |n| Ok(graph(n))).unwrap();
        let user = state.component_of("user", &mut |n| Ok(graph(n))).unwrap();
        assert_ne!(a, user);
        assert_eq!(state.component_of("b", &mut |_| unreachable!()).unwrap(), a);
    }
}
