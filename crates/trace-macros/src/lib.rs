//! `#[hotkern_trace::function]`: instruments a function's entry and exit for
//! hotkern's `function` and `function_graph` tracers.
//!
//! The attribute adds a `static` call site (the function's identity for
//! filters, profiling and the symbol table) and a guard whose creation is the
//! entry hook and whose drop is the exit hook, so every return path — early
//! `return`, `?`, unwinding — records the exit. While no tracer wants the
//! function, entry costs one load and a not-taken branch, like ftrace's
//! patched-out `fentry` call.

// The README's example is compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, ItemFn};

/// Instruments a function (or method) for function tracing.
///
/// ```
/// use hotkern_trace::function::TracerKind;
/// use hotkern_trace::{TraceConfig, Tracer};
///
/// #[hotkern_trace::function]
/// fn read_block(n: u64) -> u64 {
///     n * 2
/// }
///
/// let tracer = Tracer::with_threads(TraceConfig::small(), 1)
///     .and_then(Tracer::install)
///     .unwrap();
/// tracer.set_current_tracer(TracerKind::Function).unwrap();
/// assert_eq!(read_block(21), 42);
/// tracer.set_current_tracer(TracerKind::Nop).unwrap();
/// let calls = tracer.drain_records().iter()
///     .filter(|r| Some(r.event_id) == tracer.event_id("ftrace", "function"))
///     .count();
/// assert_eq!(calls, 1);
/// tracer.uninstall();
/// ```
///
/// It takes no arguments, and refuses `async fn`: its entry and exit would
/// bracket the creation of the future, not the work.
#[proc_macro_attribute]
pub fn function(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        let attr = proc_macro2::TokenStream::from(attr);
        return syn::Error::new_spanned(attr, "#[function] takes no arguments")
            .to_compile_error()
            .into();
    }
    let function = parse_macro_input!(item as ItemFn);
    if function.sig.asyncness.is_some() {
        return syn::Error::new_spanned(
            function.sig.fn_token,
            "#[function] does not instrument async functions (entry and exit would not bracket the work)",
        )
        .to_compile_error()
        .into();
    }
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = function;
    let name = sig.ident.to_string();
    let expanded = quote! {
        #(#attrs)*
        #vis #sig {
            static __HOTKERN_TRACE_SITE: ::hotkern_trace::function::FunctionSite =
                ::hotkern_trace::function::FunctionSite::new(
                    ::core::module_path!(),
                    #name,
                    ::core::file!(),
                    ::core::line!(),
                );
            let __hotkern_trace_guard = ::hotkern_trace::function::enter(&__HOTKERN_TRACE_SITE);
            #block
        }
    };
    expanded.into()
}
