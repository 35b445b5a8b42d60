//! Compiled modules: a `.skill.js` module is compiled once, when its file is loaded, and the
//! prelude once a process, and every fresh sandbox loads their QuickJS bytecode instead of
//! parsing the source again (parsing the prelude was a sixth of a call's CPU). Each call still
//! gets a new runtime and context; only the compiler's output is shared.
//!
//! Loading bytecode trusts it (QuickJS does not check it), so [`Bytecode`] can only be made
//! here, by compiling source in this process: no bytes from outside ever reach the loader.

use std::sync::{Arc, OnceLock};

use rquickjs::module::Declared;
use rquickjs::{CatchResultExt, Context, Ctx, Module, Runtime, WriteOptions};

/// A module's QuickJS bytecode, as this process's engine compiled it.
#[derive(Clone)]
pub struct Bytecode(Arc<[u8]>);

impl std::fmt::Debug for Bytecode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bytecode({} bytes)", self.0.len())
    }
}

impl Bytecode {
    /// The bytecode of `module`, declared (compiled) and not yet evaluated.
    pub(crate) fn of(module: &Module<'_, Declared>) -> rquickjs::Result<Bytecode> {
        Ok(Bytecode(module.write(WriteOptions::default())?.into()))
    }

    /// Declares the module again in `cx`, from its bytecode (no parsing).
    pub(crate) fn declare<'js>(&self, cx: &Ctx<'js>) -> rquickjs::Result<Module<'js, Declared>> {
        // SAFETY: the bytes were written by `Module::write` of this process's QuickJS (the only
        // way to make a `Bytecode`, in `of`), so they are valid bytecode for this engine.
        #[allow(unsafe_code)]
        unsafe {
            Module::load(cx.clone(), &self.0)
        }
    }
}

/// The prelude's source (`prelude.js`): a module whose default export makes the script's `ctx`.
const PRELUDE: &str = include_str!("prelude.js");

/// The prelude's module name, as stack traces show it.
pub(crate) const PRELUDE_NAME: &str = "skillgate:prelude";

/// The prelude, compiled the first time a sandbox needs it.
pub(crate) fn prelude() -> &'static Bytecode {
    static PRELUDE_BYTECODE: OnceLock<Bytecode> = OnceLock::new();
    PRELUDE_BYTECODE.get_or_init(|| {
        let compile = || -> Result<Bytecode, String> {
            let rt = Runtime::new().map_err(|e| e.to_string())?;
            let cx = Context::full(&rt).map_err(|e| e.to_string())?;
            cx.with(|cx| {
                Module::declare(cx.clone(), PRELUDE_NAME, PRELUDE)
                    .and_then(|m| Bytecode::of(&m))
                    .catch(&cx)
                    .map_err(|e| e.to_string())
            })
        };
        // The prelude is part of the binary: a failure is a bug, caught by every sandbox test.
        compile().unwrap_or_else(|e| panic!("the sandbox prelude does not compile: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rquickjs::Value;

    #[test]
    fn a_module_loaded_from_its_bytecode_runs_like_its_source() {
        let rt = Runtime::new().unwrap();
        let compiled = Context::full(&rt).unwrap().with(|cx| {
            let module = Module::declare(cx, "m.js", "export default (a) => a * 6;").unwrap();
            Bytecode::of(&module).unwrap()
        });
        // Another runtime, as every sandbox call has its own.
        let rt = Runtime::new().unwrap();
        let answer = Context::full(&rt).unwrap().with(|cx| {
            let (module, _) = compiled.declare(&cx).unwrap().eval().unwrap();
            let f: rquickjs::Function = module.get("default").unwrap();
            f.call::<_, Value>((7,)).unwrap().as_int()
        });
        assert_eq!(answer, Some(42));
    }
}
