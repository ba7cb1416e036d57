//! The values a caller exchanges with the client: [`Request`](request::Request),
//! [`Response`](response::Response) and [`Error`](error::Error).

pub(crate) mod attempt;
pub(crate) mod error;
pub mod request;
pub(crate) mod response;
