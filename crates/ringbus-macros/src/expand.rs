//! Code generation for `#[subscriber]`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, ItemFn, PathArguments, ReturnType, Type};

use crate::attr::Args;

/// Entry point: on any error, the error is emitted beside the original function, so editors
/// and the rest of the crate keep working.
pub(crate) fn subscriber(args: TokenStream, item: TokenStream) -> TokenStream {
    let func: ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(e) => return with_item(e, item),
    };
    let args: Args = match syn::parse2(args) {
        Ok(a) => a,
        Err(e) => return with_item(e, item),
    };
    match expand(args, func) {
        Ok(tokens) => tokens,
        Err(e) => with_item(e, item),
    }
}

fn with_item(error: syn::Error, item: TokenStream) -> TokenStream {
    let error = error.to_compile_error();
    quote!(#error #item)
}

/// How the handler takes its message.
enum Message {
    /// `msg: &T`: read in place.
    Ref(Type),
    /// `msg: T`: cloned per delivery.
    Owned(Type),
    /// `msgs: Batch<'_, T>` with the `batch` argument.
    Batch(Type),
}

/// What the handler returns.
enum Output {
    /// `()` or `Result<(), E>`: nothing to publish.
    Unit,
    /// `R`: published when `publish(..)` is given.
    Value(Type),
    /// `Result<R, E>`: `R` published when `publish(..)` is given; `E` counted.
    Result(Type),
}

const MESSAGE_FORMS: &str =
    "`msg: &T` (read in place), `msg: T` with `T: Clone` (cloned per delivery), or, with the `batch` argument, `msgs: Batch<'_, T>`";

fn expand(args: Args, func: ItemFn) -> syn::Result<TokenStream> {
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            "#[subscriber] needs an `async fn`: write `async fn`",
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "#[subscriber] functions cannot be generic: a subscriber has one concrete message type (remove the generic parameters)",
        ));
    }
    let mut inputs = sig.inputs.iter();
    let first = match inputs.next() {
        None => {
            return Err(syn::Error::new(
                sig.paren_token.span.join(),
                format!("#[subscriber] needs the message as its first parameter: {MESSAGE_FORMS}"),
            ))
        }
        Some(FnArg::Receiver(r)) => {
            return Err(syn::Error::new_spanned(
                r,
                "#[subscriber] functions cannot take `self`: write a free `async fn` and pass shared values as `State<S>` parameters",
            ))
        }
        Some(FnArg::Typed(t)) => t,
    };
    let message = message_type(&first.ty, args.batch.is_some())?;
    let mut states = Vec::new();
    for input in inputs {
        match input {
            FnArg::Receiver(r) => {
                return Err(syn::Error::new_spanned(
                    r,
                    "#[subscriber] functions cannot take `self`",
                ))
            }
            FnArg::Typed(t) => states.push(state_type(&t.ty)?),
        }
    }
    if let Some(batch) = args.batch {
        if let Some(span) = args
            .retry
            .as_ref()
            .map(|r| r.span)
            .or_else(|| args.dead_letter.as_ref().map(|d| d.span()))
        {
            let mut error = syn::Error::new(
                span,
                "batch subscribers do not retry: `retry(..)` and `dead_letter(..)` are for handlers of one message at a time (remove `batch`, or them)",
            );
            error.combine(syn::Error::new(batch, "`batch` given here"));
            return Err(error);
        }
    }
    let output = output_type(&sig.output);
    if let Some(reply) = args.reply {
        check_reply(&args, reply, &output, &sig.output)?;
    }
    if let (Some(publish), Output::Unit) = (&args.publish, &output) {
        return Err(syn::Error::new_spanned(
            publish,
            "`publish(..)` publishes the handler's return value, but this handler returns `()`: return the message to publish (`-> R` or `-> Result<R, E>`), or remove `publish(..)`",
        ));
    }

    let krate = args
        .krate
        .as_ref()
        .map(|p| p.to_token_stream())
        .unwrap_or_else(|| quote!(::ringbus));
    let vis = &func.vis;
    let ident = &sig.ident;
    let inner = format_ident!("__ringbus_{}", ident);
    let name = args
        .name
        .as_ref()
        .map(|n| n.value())
        .unwrap_or_else(|| ident.to_string());
    let topic = &args.topic;

    // The original function, kept as an associated function of the generated type.
    let docs: Vec<_> = func
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .collect();
    let mut inner_fn = func.clone();
    inner_fn.attrs.retain(|a| !a.path().is_ident("doc"));
    inner_fn.sig.ident = inner.clone();
    inner_fn.vis = syn::Visibility::Inherited;

    let state_fields: Vec<_> = (0..states.len())
        .map(|i| format_ident!("state{}", i))
        .collect();
    let msg_ty = match &message {
        Message::Ref(t) | Message::Owned(t) | Message::Batch(t) => t,
    };
    let arg = match &message {
        Message::Ref(_) | Message::Batch(_) => quote!(msg),
        Message::Owned(_) => quote!(::core::clone::Clone::clone(msg)),
    };
    let call = quote! {
        #ident::#inner(#arg #(, ::core::clone::Clone::clone(&self.#state_fields))*).await
    };
    let (out_field, out_init, result) = match (&args.publish, &output) {
        (None, _) => (quote!(), quote!(), {
            // Spanned on the return type, so a type that is not a handler's result (a
            // message without `publish(..)`) is reported where it is written.
            let span = match &func.sig.output {
                ReturnType::Type(_, ty) => ty.span(),
                ReturnType::Default => proc_macro2::Span::call_site(),
            };
            quote_spanned!(span=> #krate::HandlerOutput::into_result(value))
        }),
        (Some(target), Output::Value(r)) => (
            quote!(out: #krate::Topic<#r>,),
            quote!(out: bus.topic::<#r>(#target)?,),
            quote!(#krate::__private::forward(&self.out, value).await),
        ),
        (Some(target), Output::Result(r)) => (
            quote!(out: #krate::Topic<#r>,),
            quote!(out: bus.topic::<#r>(#target)?,),
            quote! {
                match value {
                    ::core::result::Result::Ok(v) => #krate::__private::forward(&self.out, v).await,
                    ::core::result::Result::Err(e) => ::core::result::Result::Err(#krate::HandlerError::new(e)),
                }
            },
        ),
        (Some(_), Output::Unit) => unreachable!("checked above"),
    };
    let reply_ty = match (&args.reply, &output) {
        (Some(_), Output::Value(r) | Output::Result(r)) => Some(r),
        _ => None,
    };
    let handler_impl = match (&message, reply_ty) {
        (_, Some(r)) => {
            // `R` or `Result<R, E>`: `ReplyOutput` says which, and reports anything else on
            // the return type.
            let span = match &func.sig.output {
                ReturnType::Type(_, ty) => ty.span(),
                ReturnType::Default => proc_macro2::Span::call_site(),
            };
            let into_reply = quote_spanned!(span=> #krate::ReplyOutput::<#r>::into_reply(value));
            quote! {
                impl #krate::Replier<#msg_ty, #r> for __Handler {
                    fn call<'a>(
                        &'a self,
                        msg: &'a #msg_ty,
                    ) -> impl #krate::__private::Future<Output = ::core::result::Result<#r, #krate::HandlerError>> + ::core::marker::Send + 'a {
                        async move {
                            let value = #call;
                            #into_reply
                        }
                    }
                }
            }
        }
        (Message::Batch(_), None) => quote! {
            impl #krate::BatchHandler<#msg_ty> for __Handler {
                fn call<'a>(
                    &'a self,
                    msg: #krate::Batch<'a, #msg_ty>,
                ) -> impl #krate::__private::Future<Output = ::core::result::Result<(), #krate::HandlerError>> + ::core::marker::Send + 'a {
                    async move {
                        let value = #call;
                        #result
                    }
                }
            }
        },
        (_, None) => quote! {
            impl #krate::Handler<#msg_ty> for __Handler {
                fn call<'a>(
                    &'a self,
                    msg: &'a #msg_ty,
                ) -> impl #krate::__private::Future<Output = ::core::result::Result<(), #krate::HandlerError>> + ::core::marker::Send + 'a {
                    async move {
                        let value = #call;
                        #result
                    }
                }
            }
        },
    };
    // The dead-letter topic is resolved at `register` (a type mismatch is an `Err` there),
    // through a function whose `T: Clone` bound is reported on the argument.
    let options = match &args.dead_letter {
        None => quote!(self.options()),
        Some(topic) => quote_spanned! {topic.span()=>
            #krate::__private::dead_letter::<#msg_ty>(bus, self.options(), #topic)?
        },
    };
    let subscribe = match &message {
        _ if reply_ty.is_some() => quote!(bus.reply_with(self.topic(), #options, handler)),
        Message::Batch(_) => quote!(bus.subscribe_batch(self.topic(), #options, handler)),
        // A topic with a `*` or `>` token is a pattern (it may be a `const`: decided at
        // `register`); its handler is not told the topic.
        _ => quote!({
            let options = #options;
            if #krate::__private::is_pattern(self.topic()) {
                bus.subscribe_pattern_with(
                    self.topic(),
                    options,
                    #krate::__private::IgnoreTopic(handler),
                )
            } else {
                bus.subscribe_with(self.topic(), options, handler)
            }
        }),
    };
    let capacity = args
        .capacity
        .as_ref()
        .map(|c| quote_spanned!(c.span()=> let options = options.capacity(#c);));
    let stall = args
        .stall_timeout
        .as_ref()
        .map(|d| quote_spanned!(d.span()=> let options = options.stall_timeout(#d);));
    let retry = args.retry.as_ref().map(|r| {
        let settings = r
            .settings
            .iter()
            .map(|(key, value)| quote_spanned!(value.span()=> .#key(#value)));
        quote_spanned! {r.span=>
            let options = options.retry(
                <#krate::RetryPolicy as ::core::default::Default>::default() #(#settings)*
            );
        }
    });
    let message_ty = match reply_ty {
        Some(r) => quote!(#krate::Request<#msg_ty, #r>),
        None => quote!(#msg_ty),
    };
    let struct_doc =
        format!("The `#[subscriber]` handler `{ident}`: register it with `bus.register({ident})`.");

    Ok(quote! {
        #(#docs)*
        #[doc = ""]
        #[doc = #struct_doc]
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, Default)]
        #vis struct #ident;

        impl #ident {
            #[doc(hidden)]
            #inner_fn
        }

        const _: () = {
            struct __Handler {
                #( #state_fields: #krate::State<#states>, )*
                #out_field
            }

            #handler_impl

            impl #krate::Subscriber for #ident {
                type Message = #message_ty;

                fn topic(&self) -> &str {
                    #topic
                }

                fn options(&self) -> #krate::SubscribeOptions {
                    let options = #krate::SubscribeOptions::new().name(#name);
                    #capacity
                    #stall
                    #retry
                    options
                }

                fn subscribe(
                    self,
                    bus: &#krate::Bus,
                ) -> ::core::result::Result<#krate::Subscription, #krate::Error> {
                    let handler = __Handler {
                        #( #state_fields: #krate::__private::state::<#states>(bus, #name)?, )*
                        #out_init
                    };
                    #subscribe
                }
            }
        };
    })
}

/// `reply` goes with a handler of one message at a time that returns its reply, and with
/// none of the arguments that do something else with the outcome.
fn check_reply(
    args: &Args,
    reply: proc_macro2::Span,
    output: &Output,
    written: &ReturnType,
) -> syn::Result<()> {
    let conflict = [
        (
            args.batch,
            "`batch`: a batch handler cannot answer each request",
        ),
        (
            args.publish.as_ref().map(|p| p.span()),
            "`publish(..)`: a replier's return value is the reply, not a message to publish",
        ),
        (
            args.retry.as_ref().map(|r| r.span),
            "`retry(..)`: a replier does not retry (its requester waits for the first outcome)",
        ),
        (
            args.dead_letter.as_ref().map(|d| d.span()),
            "`dead_letter(..)`: a replier's failure goes to its requester",
        ),
    ];
    if let Some((Some(span), why)) = conflict.into_iter().find(|(span, _)| span.is_some()) {
        let mut error = syn::Error::new(span, format!("`reply` does not go with {why}"));
        error.combine(syn::Error::new(reply, "`reply` given here"));
        return Err(error);
    }
    if let Output::Unit = output {
        let message = "a `reply` handler returns the reply: `-> R` or `-> Result<R, E>` (it returns `()` here)";
        return Err(match written {
            ReturnType::Type(_, ty) => syn::Error::new_spanned(ty, message),
            ReturnType::Default => syn::Error::new(reply, message),
        });
    }
    Ok(())
}

/// The message type from the first parameter's type.
fn message_type(ty: &Type, batch: bool) -> syn::Result<Message> {
    if batch {
        if let Some(inner) = last_segment_arg(ty, "Batch") {
            return Ok(Message::Batch(inner));
        }
        return Err(syn::Error::new_spanned(
            ty,
            "with the `batch` argument the first parameter is the batch: `msgs: Batch<'_, T>`",
        ));
    }
    match ty {
        Type::Reference(r) if r.mutability.is_some() => Err(syn::Error::new_spanned(
            r.mutability,
            format!("a handler cannot mutate the message (other subscribers read it too): take {MESSAGE_FORMS}"),
        )),
        Type::Reference(r) => Ok(Message::Ref((*r.elem).clone())),
        Type::ImplTrait(_) | Type::Infer(_) => Err(syn::Error::new_spanned(
            ty,
            format!("the message needs a concrete type: {MESSAGE_FORMS}"),
        )),
        _ if last_segment_arg(ty, "Batch").is_some() => Err(syn::Error::new_spanned(
            ty,
            "a `Batch` parameter needs the `batch` argument: #[subscriber(\"topic\", batch)]",
        )),
        _ => Ok(Message::Owned(ty.clone())),
    }
}

/// `S` from `State<S>`, or an error saying what extra parameters may be.
fn state_type(ty: &Type) -> syn::Result<Type> {
    last_segment_arg(ty, "State").ok_or_else(|| {
        syn::Error::new_spanned(
            ty,
            "after the message, a #[subscriber] function takes only `State<S>` parameters (shared values registered with `Bus::builder().state(value)`)",
        )
    })
}

/// The single type argument of a path type whose last segment is `name`.
fn last_segment_arg(ty: &Type, name: &str) -> Option<Type> {
    let Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?;
    if last.ident != name {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    args.args.iter().find_map(|a| match a {
        GenericArgument::Type(t) => Some(t.clone()),
        _ => None,
    })
}

fn output_type(output: &ReturnType) -> Output {
    let ReturnType::Type(_, ty) = output else {
        return Output::Unit;
    };
    if is_unit(ty) {
        return Output::Unit;
    }
    if let Type::Path(p) = &**ty {
        if let Some(last) = p.path.segments.last() {
            if last.ident == "Result" {
                if let PathArguments::AngleBracketed(args) = &last.arguments {
                    if let Some(GenericArgument::Type(ok)) = args.args.first() {
                        return if is_unit(ok) {
                            Output::Unit
                        } else {
                            Output::Result(ok.clone())
                        };
                    }
                }
            }
        }
    }
    Output::Value((**ty).clone())
}

fn is_unit(ty: &Type) -> bool {
    matches!(ty, Type::Tuple(t) if t.elems.is_empty())
}
