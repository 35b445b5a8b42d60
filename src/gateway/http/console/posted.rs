//! Console form posts: the form's fields, read as every HTTP door reads a body (within the
//! body limit, the body timeout and the receive budget), and when the body could not be read,
//! the page saying why with the status the API would answer (busy 503 with `Retry-After`, too
//! slow 408, too large 413), where axum's `Form` answers 400 for any of them.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::gateway::body;
use crate::gateway::http::state::AppState;

use super::{page, pages};

/// The fields of an `application/x-www-form-urlencoded` post.
pub struct Posted<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for Posted<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Response> {
        let limit = state.config.body_limit;
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            let err = body::rejected(&rejection, limit);
            let detail = err.to_string();
            let api = err.into_response();
            let mut response = page(
                api.status(),
                pages::problem(None, "Not read", &detail),
                None,
            );
            if let Some(wait) = api.headers().get(header::RETRY_AFTER) {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, wait.clone());
            }
            response
        })?;
        serde_urlencoded::from_bytes(&bytes)
            .map(Posted)
            .map_err(|err| {
                page(
                    StatusCode::BAD_REQUEST,
                    pages::problem(
                        None,
                        "Not read",
                        &format!("the form could not be read: {err}"),
                    ),
                    None,
                )
            })
    }
}
