export { WebhookdClient, ROUTES, VERSION } from "./client.js";
export type { ClientOptions, CallOptions, MutatingCallOptions } from "./client.js";
export { WebhookdError, WebhookdAbortError, WebhookdNetworkError } from "./errors.js";
export { DEFAULT_RETRY_POLICY, backoff, parseRetryAfter } from "./retry.js";
export type { RetryPolicy } from "./retry.js";
export { verify, sign, WebhookVerificationError } from "./verify.js";
export type { VerifyOptions } from "./verify.js";
export type * from "./types.js";
