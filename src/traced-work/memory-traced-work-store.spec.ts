import { behavesAsATracedWorkStore } from '../../test/suites/traced-work-store.suite';
import { memoryWorld } from '../../test/suites/store-world';

behavesAsATracedWorkStore(memoryWorld());
