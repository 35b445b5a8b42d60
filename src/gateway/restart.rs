//! Settings a reload cannot apply to a running door: kept as they run and named, so the reload
//! can say they take effect at the next start.

/// For each `field => "name"`: when `next.field` differs from `running.field`, pushes the name
/// on `changed` and puts the running value back in `next`.
macro_rules! keep_running {
    ($running:expr, $next:expr, $changed:expr; $($field:ident => $name:literal),* $(,)?) => {$(
        if $running.$field != $next.$field {
            $changed.push($name);
            $next.$field = $running.$field.clone();
        }
    )*};
}

pub(crate) use keep_running;
