import { behavesAsAnOutboxStore } from '../../test/suites/outbox-store.suite';
import { memoryWorld } from '../../test/suites/store-world';

behavesAsAnOutboxStore(memoryWorld());
