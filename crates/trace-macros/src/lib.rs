//! [`#[hotkern_trace::function]`][function]: instruments a function's entry
//! and exit for [hotkern-trace]'s `function` and `function_graph` tracers.
//!
//! The attribute adds a `static` call site (the function's identity for
//! filters, profiling and the symbol table) and a guard whose creation is the
//! entry hook and whose drop is the exit hook, so every return path — early
//! `return`, `?`, unwinding — records the exit. The entry is a call site
//! that hotkern-trace patches ([`hotkern_trace::site`][site]): while no
//! tracer wants the function it is a NOP, like ftrace's patched-out
//! `fentry` call (one load and a not-taken branch where text cannot be
//! patched).
//!
//! Use it through hotkern-trace, which re-exports it; this crate cannot
//! link to it (hotkern-trace depends on this crate, not the other way), so
//! the links go to docs.rs.
//!
//! [hotkern-trace]: https://docs.rs/hotkern-trace/0.1/hotkern_trace/
//! [function]: https://docs.rs/hotkern-trace/0.1/hotkern_trace/attr.function.html
//! [site]: https://docs.rs/hotkern-trace/0.1/hotkern_trace/site/index.html

#![doc(html_root_url = "https://docs.rs/hotkern-trace-macros/0.1")]

// The README's example is compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, parse_quote, ItemFn, ReturnType, Type};

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
/// Its one argument, `crate = path`, names `hotkern-trace` for a crate
/// that depends on it under another name (as serde's `#[serde(crate = …)]`
/// does); the expansion names `::hotkern_trace` otherwise:
///
/// ```
/// // As if `Cargo.toml` said `tracing2 = { package = "hotkern-trace", … }`.
/// extern crate hotkern_trace as tracing2;
///
/// #[tracing2::function(crate = tracing2)]
/// fn read_block(n: u64) -> u64 {
///     n * 2
/// }
/// assert_eq!(read_block(21), 42);
/// ```
///
/// It refuses `async fn`: its entry and exit would bracket the creation of
/// the future, not the work.
#[proc_macro_attribute]
pub fn function(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut krate: syn::Path = parse_quote!(::hotkern_trace);
    let arguments = syn::meta::parser(|meta| {
        if meta.path.is_ident("crate") {
            let value = meta.value()?;
            // A path, or a string holding one as serde's attribute takes.
            krate = if value.peek(syn::LitStr) {
                value.parse::<syn::LitStr>()?.parse()?
            } else {
                value.parse()?
            };
            Ok(())
        } else {
            Err(meta.error("#[function] takes one argument, `crate = path`"))
        }
    });
    parse_macro_input!(attr with arguments);
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
    // The body becomes an `FnOnce` closure, run directly while the call
    // site is a NOP and between the entry and exit hooks when it jumps
    // (`hotkern_trace::site`): the fast path is then the body alone. The
    // closure is typed with the function's return type (`return` and `?`
    // inside it infer as in the function), except where that type is an
    // `impl Trait`, which cannot be named there, or `!`. The body is the
    // closure's whole block (`|| -> _ { … }`), never a block nested in
    // another, so the user's crate sees no `unused_braces` (the attribute
    // once expanded to `{ …; #block }`, which warned on every
    // one-expression function).
    let output: Type = match &sig.output {
        ReturnType::Default => parse_quote!(()),
        ReturnType::Type(_, ty) => (**ty).clone(),
    };
    let body = if matches!(output, Type::Never(_)) {
        // `!` is no type argument on stable Rust, but a closure's return.
        quote! { #krate::function::body(move || -> ! #block) }
    } else if mentions_impl(quote!(#output)) {
        quote! { #krate::function::body(move || -> _ #block) }
    } else {
        quote! { #krate::function::body::<#output, _>(move || -> _ #block) }
    };
    let expanded = quote! {
        #(#attrs)*
        #vis #sig {
            static __HOTKERN_TRACE_SITE: #krate::function::FunctionSite =
                #krate::function::FunctionSite::new(
                    ::core::module_path!(),
                    #name,
                    ::core::file!(),
                    ::core::line!(),
                );
            let __hotkern_trace_body = #body;
            #krate::__function_call!(__HOTKERN_TRACE_SITE, __hotkern_trace_body)
        }
    };
    expanded.into()
}

/// Whether a type mentions `impl` (an `impl Trait`) anywhere.
fn mentions_impl(tokens: proc_macro2::TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        proc_macro2::TokenTree::Ident(ident) => ident == "impl",
        proc_macro2::TokenTree::Group(group) => mentions_impl(group.stream()),
        _ => false,
    })
}
