import { behavesAsAGrantStore } from '../../test/suites/grant-store.suite';
import { memoryWorld } from '../../test/suites/store-world';

behavesAsAGrantStore(memoryWorld());
