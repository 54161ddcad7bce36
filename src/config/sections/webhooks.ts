import { Integer, OptionalText, Variable } from '../variable';

/** GitLab's webhooks (SPEC §10): their secrets, and the spool that holds them while the store is down. */
export class WebhooksConfig {
  /**
   * Secrets GitLab's webhooks send as `X-Gitlab-Token`, one per line (two during a rotation). Unset: no
   * webhook is accepted, and a job span is closed from its runner's `job_execution` span instead.
   */
  @Variable('GITLAB_WEBHOOK_SECRET_FILE') @OptionalText() readonly secretFile?: string;

  /**
   * How long a webhook waits for the store before it is spooled and answered 202: well inside GitLab's own
   * webhook timeout (10 s by default), after which GitLab counts the delivery failed.
   */
  @Variable('WEBHOOK_STORE_TIMEOUT_MS') @Integer({ min: 1, max: 5000 }) readonly storeTimeoutMs: number = 2000;

  /** Where this replica spools webhooks the store cannot take; unset: `<DATA_DIR>/webhook-spool`. One per replica. */
  @Variable('WEBHOOK_SPOOL_DIR') @OptionalText() readonly spoolDir?: string;

  /** Webhooks the spool holds; past either bound a webhook is answered 503, which GitLab counts as failed. */
  @Variable('WEBHOOK_SPOOL_MAX_HOOKS') @Integer({ min: 1 }) readonly spoolMaxHooks: number = 20_000;

  @Variable('WEBHOOK_SPOOL_MAX_BYTES') @Integer({ min: 1024 }) readonly spoolMaxBytes: number = 256 * 1024 * 1024;

  /** Longest wait between two replays of the spool while the store is still down. */
  @Variable('WEBHOOK_REPLAY_MAX_BACKOFF_SECONDS') @Integer({ min: 1 }) readonly replayMaxBackoffSeconds: number = 30;
}
