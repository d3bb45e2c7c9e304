//! `#[hotkern_trace::function]`: instruments a function's entry and exit for
//! hotkern's `function` and `function_graph` tracers.
//!
//! The attribute adds a `static` call site (the function's identity for
//! filters, profiling and the symbol table) and a guard whose creation is the
//! entry hook and whose drop is the exit hook, so every return path — early
//! `return`, `?`, unwinding — records the exit. While no tracer wants the
//! function, entry costs one load and a not-taken branch, like ftrace's
//! patched-out `fentry` call.

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, ItemFn};

/// Instruments a function (or method) for function tracing.
///
/// ```ignore
/// #[hotkern_trace::function]
/// fn read_block(n: u64) -> u64 { n * 2 }
/// ```
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
