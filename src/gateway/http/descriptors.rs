//! The file descriptor budget of the connection cap: every open connection holds a descriptor,
//! and the process needs others for its store, skill files and logs, so the cap is fitted to
//! the process's descriptor limit (raised toward the hard limit when that makes room).

/// The connection cap to run with: `wanted` if the descriptor limit leaves room for it (the
/// soft limit is raised toward the hard one when needed), else as many as the limit leaves.
pub fn fit(wanted: usize) -> usize {
    #[cfg(unix)]
    {
        unix::fit(wanted)
    }
    #[cfg(not(unix))]
    {
        wanted
    }
}

/// Descriptors kept for everything but connections: a quarter of the limit, 16 to 256.
fn reserve(limit: u64) -> u64 {
    (limit / 4).clamp(16, 256)
}

/// The cap `limit` descriptors allow: `wanted`, or what is left after the reserve (at least 1).
fn allowed(wanted: usize, limit: u64) -> usize {
    let room = limit.saturating_sub(reserve(limit)).max(1);
    wanted.min(usize::try_from(room).unwrap_or(usize::MAX))
}

#[cfg(unix)]
mod unix {
    use rustix::process::{Resource, getrlimit, setrlimit};

    pub fn fit(wanted: usize) -> usize {
        let limit = getrlimit(Resource::Nofile);
        let Some(soft) = limit.current else {
            return wanted;
        };
        if super::allowed(wanted, soft) == wanted {
            return wanted;
        }
        // Raising the soft limit up to the hard one needs no privilege.
        let needed = (wanted as u64).saturating_add(256);
        let raised = limit.maximum.map_or(needed, |hard| needed.min(hard));
        if raised > soft {
            let mut new = limit;
            new.current = Some(raised);
            if setrlimit(Resource::Nofile, new).is_ok() {
                return super::allowed(wanted, raised);
            }
        }
        super::allowed(wanted, soft)
    }
}

#[cfg(test)]
mod tests {
    use super::allowed;

    #[test]
    fn the_cap_leaves_descriptors_for_the_rest_of_the_process() {
        assert_eq!(allowed(1024, 1_048_576), 1024);
        assert_eq!(allowed(1024, 1024), 768);
        assert_eq!(allowed(1024, 256), 192);
        assert_eq!(allowed(10, 20), 4);
        assert_eq!(allowed(10, 0), 1);
    }
}
