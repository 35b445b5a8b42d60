//! `public/` files, served as they are, except dotfiles (`.env`, `.git/config`) and anything a
//! symlink leads out of the folder to: those are 404, like a missing file. `/.well-known/`
//! (RFC 8615) is served: it exists to be public.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use percent_encoding::percent_decode_str;
use tower::ServiceExt;
use tower_http::services::ServeDir;

use crate::gateway::http::ops;
use crate::gateway::http::startup::BindError;

/// The folder, resolved, and the file server over it.
#[derive(Clone)]
pub struct PublicDir {
    root: Arc<PathBuf>,
    files: ServeDir,
}

impl PublicDir {
    /// Serves `dir`, which must exist; folders are answered with their `index.html`.
    pub fn new(dir: &Path) -> Result<PublicDir, BindError> {
        let root = std::fs::canonicalize(dir).map_err(|source| BindError::PublicDir {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(PublicDir {
            files: ServeDir::new(&root).append_index_html_on_directories(true),
            root: Arc::new(root),
        })
    }

    /// Serves one request (the router's fallback); what is not served is the 404 problem.
    pub async fn serve(self, req: Request) -> Response {
        let uri = req.uri().clone();
        if !self.allows(uri.path()).await {
            return ops::not_found(uri).await;
        }
        let response = match self.files.oneshot(req).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        if response.status() == StatusCode::NOT_FOUND {
            return ops::not_found(uri).await;
        }
        response.into_response()
    }

    /// True when `path` (as requested) names nothing hidden and stays inside the folder. A
    /// path that does not exist passes: the file server answers it 404.
    async fn allows(&self, path: &str) -> bool {
        // Decoded as the file server decodes it, so `/%2eenv` is `/.env`; what does not
        // decode, the file server refuses itself.
        let Ok(decoded) = percent_decode_str(path).decode_utf8() else {
            return true;
        };
        let mut full = self.root.to_path_buf();
        let segments = decoded.split('/').filter(|s| !s.is_empty());
        for (i, segment) in segments.enumerate() {
            if segment.starts_with('.') && !(i == 0 && segment == ".well-known") {
                return false;
            }
            full.push(segment);
        }
        let Ok(real) = tokio::fs::canonicalize(&full).await else {
            return true;
        };
        if !real.starts_with(&*self.root) {
            return false;
        }
        // A folder is answered with its `index.html`, which may be a symlink too.
        if tokio::fs::metadata(&real).await.is_ok_and(|m| m.is_dir())
            && let Ok(index) = tokio::fs::canonicalize(real.join("index.html")).await
        {
            return index.starts_with(&*self.root);
        }
        true
    }
}
