import { behavesAsALimitStore } from '../../test/suites/limit-store.suite';
import { memoryWorld } from '../../test/suites/store-world';

behavesAsALimitStore(memoryWorld());
