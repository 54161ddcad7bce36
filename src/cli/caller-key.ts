/* Prints a new caller key for a third-party gateway and the digest to put in AUTH_CALLER_KEY_DIGESTS. */
import { callerKeyDigest, generateCallerKey } from '../internal-api/caller-keys';

const key = generateCallerKey();
process.stdout.write(`caller key (give it to the gateway, nowhere else): ${key}\n`);
process.stdout.write(`AUTH_CALLER_KEY_DIGESTS entry (safe to publish): ${callerKeyDigest(key)}\n`);
