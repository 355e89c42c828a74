//! The C ABI shared by our libibverbs, librdmacm and providers.
//!
//! `verbs` and `cma` mirror the public structs of rdma-core 44's
//! `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>` field for field (checked
//! against `abi/rdma-core-44/layout.txt` by the tests); `provider` is our own,
//! documented ABI between libibverbs and a provider shared object;
//! `driver` and `uverbs` are rdma-core's provider layouts and the kernel's
//! (checked against the C headers); `vctx` the `verbs_context` size rules.
//! Types, constants and layouts only: what runs (errno, the export macros,
//! the tracer, the misuse checker, logging) is `verbs_rt`'s.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

pub mod cma;
pub mod driver;
pub mod provider;
pub mod uverbs;
pub mod vctx;
pub mod verbs;

pub use cma::*;
pub use vctx::{verbs_context_covers, verbs_context_has, verbs_context_of};
pub use verbs::*;
